"""What an nn.Module says about its attention, without tracing: parameter metadata and head facts.

Metadata only (the recogniser that turns it into blocks is ``mhainspect.frontends.torch.frontend``):
nn.MultiheadAttention (packed ``in_proj_weight`` or separate q/k/v_proj_weight with kdim/vdim,
``bias_k``/``bias_v``, bias off) and Hugging Face style attention modules (q/k/v/o or fused qkv
projections; heads from ``num_heads``/``num_attention_heads``/``num_key_value_heads``/
``head_dim`` on the module or its ``config``). The projections are found by the same name
grouping as checkpoints (``mhainspect.matchers.grouping``) over the module's own parameters, so a
module, its state dict and its ONNX export name their blocks the same way.

A module whose heads cannot be read from attributes or config is left for tracing (``pending``);
so is an attention-named module without recognisable projections.
"""

from __future__ import annotations

import ast
import functools
import inspect as pyinspect
import math
import operator
import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from mhainspect.frontends.checkpoint.quantized import MAX_VALUE_BYTES, apply_quantization, wants_values
from mhainspect.frontends.torch.fx import storage_key
from mhainspect.frontends.torch.known import SCALE_ATTRS, attribute_offers, mha_offers, mha_scale
from mhainspect.ir.dtypes import canonical
from mhainspect.ir.weights import HeadOffers, QuantRole, WeightMeta


def parameter_metas(model: nn.Module) -> dict[str, WeightMeta]:
    """Every parameter (tied ones under each name) with its layout from the owning module's type."""
    owners: dict[str, nn.Module] = dict(model.named_modules(remove_duplicate=False))
    out: dict[str, WeightMeta] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        owner_path, _, leaf = name.rpartition(".")
        owner = owners.get(owner_path)
        layout = ""
        if isinstance(owner, nn.Linear) or (leaf.endswith("proj_weight") and isinstance(owner, nn.MultiheadAttention)):
            layout = "out_in"
        elif owner is not None and type(owner).__name__ == "Conv1D" and hasattr(owner, "nf"):
            layout = "in_out"
        out[name] = WeightMeta(name, tuple(int(d) for d in p.shape), canonical(str(p.dtype)),
                               storage_key(p), layout)
    return out


@dataclass(frozen=True)
class ModuleTensors:
    """Every parameter and buffer of a module as metadata, with Linears replaced by quantized
    modules (GPTQ/AWQ QuantLinear buffers, FP8Linear, ...) read as the checkpoint loader reads
    their state dict (``mhainspect.frontends.checkpoint.quantized``): the packed weight at its logical shape,
    its scales and zero points quantization data."""

    params: dict[str, WeightMeta]  # parameter_metas
    metas: dict[str, WeightMeta]  # parameters and buffers
    parameters: frozenset[str]  # storage keys of the parameters: the module's own, but quantization
    # data, and quantized weights held as buffers
    quantized: bool

    def for_grouping(self) -> dict[str, WeightMeta]:
        """The parameters, with the quantized Linears' weights and biases (buffers too)."""
        if not self.quantized:
            return self.params
        modules = {n.rpartition(".")[0] for n, m in self.metas.items()
                   if m.quant is not None and m.quant.role is QuantRole.WEIGHT}
        return {n: m for n, m in self.metas.items()
                if n in self.params or m.quant is not None or n.rpartition(".")[0] in modules}


def module_tensors(model: nn.Module) -> ModuleTensors:
    params = parameter_metas(model)
    metas: dict[str, WeightMeta] = dict(params)
    own = frozenset(m.storage_key for m in metas.values())
    values: dict[str, tuple[int, ...]] = {}
    for name, buf in model.named_buffers(remove_duplicate=False):
        metas.setdefault(name, WeightMeta(name, tuple(int(d) for d in buf.shape), canonical(str(buf.dtype)),
                                          storage_key(buf)))
        if (wants_values(name) and buf.device.type != "meta"
                and buf.numel() * buf.element_size() <= MAX_VALUE_BYTES):
            values[name] = tuple(int(x) for x in buf.reshape(-1).tolist())
    quantized = apply_quantization(metas, config_dict(model), values)
    if not any(m.quant is not None for m in quantized.values()):
        return ModuleTensors(params, metas, own, False)
    keys = {m.storage_key for m in quantized.values() if m.storage_key in own and m.quant is None}
    keys |= {m.storage_key for m in quantized.values() if m.quant is not None and m.quant.role is QuantRole.WEIGHT}
    return ModuleTensors(params, quantized, frozenset(keys), True)


def count_parameters(model: nn.Module, *, trainable_only: bool = False) -> int:
    """Unique parameters by storage (tied weights once); ``trainable_only``: those with requires_grad.

    (A module's own counter: checkpoints count their WeightMeta with ``ir.weights.count_weights``;
    only a live module knows requires_grad.)"""
    seen: set[str] = set()
    total = 0
    for _, p in model.named_parameters(remove_duplicate=False):
        key = storage_key(p)
        if key not in seen:
            seen.add(key)
            if p.requires_grad or not trainable_only:
                total += p.numel()
    return total


def module_offers(module: nn.Module, label: str) -> HeadOffers | None:
    """Head evidence from a module's own attributes."""
    if isinstance(module, nn.MultiheadAttention):
        return mha_offers(module.num_heads, module.head_dim, label)
    return attribute_offers(lambda n: getattr(module, n, None), type(module).__name__, label)


def config_dict(obj: Any) -> Mapping[str, Any] | None:
    cfg = getattr(obj, "config", None)
    if cfg is None:
        return None
    to_dict = getattr(cfg, "to_dict", None)
    if callable(to_dict):
        try:
            d = to_dict()
        except Exception:  # a third-party config whose to_dict fails: use its attributes
            d = None
        if isinstance(d, Mapping):
            return d
    if isinstance(cfg, Mapping):
        return cfg
    attrs = getattr(cfg, "__dict__", None)
    return attrs if isinstance(attrs, Mapping) else None


def module_scale(module: nn.Module) -> tuple[float | None, str]:
    """The factor the module's scores are multiplied by, with what says so; (None, why) when it
    cannot be told.

    A scale attribute (``scaling``) is the factor the attention function applies to Q·Kᵀ; a
    forward that rescales the query or key before it (ESM and Evolla scale the query by
    head_size ** -0.5 ahead of the rotary embedding and pass ``scaling = 1.0``) composes with it,
    as the graph path composes every factor between the projections and the Softmax. The forward's
    own code is read for such rescalings (never run); one whose factor does not evaluate from the
    module's attributes makes the scale unknown rather than the attribute's alone."""
    if isinstance(module, nn.MultiheadAttention):
        return mha_scale(module.head_dim)
    for n in SCALE_ATTRS:
        v = getattr(module, n, None)
        if isinstance(v, float) and v > 0:
            said = f"{type(module).__name__}.{n} = {v:.6g}"
            pre = forward_rescaling(module)
            if pre is None:
                return v, said
            factor, how = pre
            if factor is None:
                return None, f"{said}, and forward rescales {how}: the scale is not known"
            return v * factor, f"{said} × {factor:.6g} ({type(module).__name__}.forward rescales {how})"
    return None, ""


# Local names a forward gives the query or key (query_layer, query_states, q, key_states, k, ...).
_QK_NAME = re.compile(r"^(q|k|query|key|queries|keys)(_[a-z0-9_]*)?$")
_MATH_FUNCTIONS: dict[str, Callable[[float], float]] = {"sqrt": math.sqrt}


def forward_rescaling(module: nn.Module) -> tuple[float | None, str] | None:
    """The product of the factors the module's forward multiplies (or divides) its query or key by,
    read from the forward's source (``q = q * f``, ``q *= f``, ``q /= f``), with the statements; the
    factor None when one does not evaluate; None when there is none (or no source to read)."""
    found = _rescalings(type(module).forward)
    if not found:
        return None
    factor: float | None = 1.0
    for multiplies, by, _ in found:
        value = _evaluate(by, module)
        if value is None or value == 0 or factor is None:
            factor = None
        else:
            factor = factor * value if multiplies else factor / value
    return factor, "; ".join(f"`{text}`" for _, _, text in found)


@functools.cache
def _rescalings(forward: Callable[..., Any]) -> tuple[tuple[bool, ast.expr, str], ...]:
    """(multiplies, factor expression, statement) of each rescaling of a query or key in a module
    class's ``forward``."""
    try:
        tree = ast.parse(textwrap.dedent(pyinspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return ()
    out: list[tuple[bool, ast.expr, str]] = []
    for node in ast.walk(tree):
        target: ast.expr | None = None
        op: ast.operator | None = None
        by: ast.expr | None = None
        if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Mult, ast.Div)):
            target, op, by = node.target, node.op, node.value
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp)
              and isinstance(node.value.op, (ast.Mult, ast.Div))):
            target, op = node.targets[0], node.value.op
            left, right = node.value.left, node.value.right
            if isinstance(target, ast.Name) and isinstance(left, ast.Name) and left.id == target.id:
                by = right
            elif (isinstance(target, ast.Name) and isinstance(right, ast.Name) and right.id == target.id
                  and isinstance(op, ast.Mult)):
                by = left
        if isinstance(target, ast.Name) and by is not None and op is not None and _QK_NAME.match(target.id):
            out.append((isinstance(op, ast.Mult), by, ast.unparse(node)))
    return tuple(out)


def _evaluate(node: ast.expr, module: nn.Module) -> float | None:
    """A factor built of numbers, the module's numeric attributes (``self.head_dim``), + - * / **
    and math.sqrt; None for anything else (a tensor, a local variable)."""
    if isinstance(node, ast.Constant):
        return _number(node.value)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return _number(getattr(module, node.attr, None))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _evaluate(node.operand, module)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp):
        return _evaluate_binary(node, module)
    if isinstance(node, ast.Call):
        return _evaluate_math_call(node, module)
    return None


def _number(value: object) -> float | None:
    """An int or float (not a bool) as a float; None for anything else."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


_BINARY: dict[type[ast.operator], Callable[[float, float], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Pow: operator.pow}


def _evaluate_binary(node: ast.BinOp, module: nn.Module) -> float | None:
    op = _BINARY.get(type(node.op))
    a, b = _evaluate(node.left, module), _evaluate(node.right, module)
    if op is None or a is None or b is None:
        return None
    try:
        out = op(a, b)
    except (ZeroDivisionError, OverflowError):
        return None
    return out if isinstance(out, float) else None  # a negative number to a fractional power is complex


def _evaluate_math_call(node: ast.Call, module: nn.Module) -> float | None:
    """``math.<function>(x)`` of one evaluable argument (_MATH_FUNCTIONS)."""
    func = node.func
    if (len(node.args) != 1 or node.keywords or not isinstance(func, ast.Attribute)
            or not isinstance(func.value, ast.Name) or func.value.id != "math" or func.attr not in _MATH_FUNCTIONS):
        return None
    arg = _evaluate(node.args[0], module)
    try:
        return _MATH_FUNCTIONS[func.attr](arg) if arg is not None else None
    except ValueError:
        return None


def is_cross_module(module: nn.Module) -> bool:
    """What the module itself says: a cross-attention flag, or nn.MultiheadAttention with kdim/vdim."""
    if getattr(module, "is_cross_attention", False) is True:
        return True
    if isinstance(module, nn.MultiheadAttention):
        return not module._qkv_same_embed_dim
    return False
