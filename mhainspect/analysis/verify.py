"""Run-time confirmation of the static findings (``--verify``): one onnxruntime run on CPU.

The model runs once on synthetic inputs built from its input signature. A temporary copy
(in a temp dir, removed afterwards; the user's file is only read) exposes, per block, the
tensor that shows the head count:

- decomposed attention: the Softmax output, ``[batch, heads, q_len, kv_len]``; folded
  ``[batch*heads, q_len, kv_len]`` gives heads = dim0 / batch; grouped ``[batch, kv, group, q, kv_len]``
  gives heads = kv * group. Key/value heads: the K projection's output width divided by the
  head size the run implies (Q projection width / observed heads), when Q and K have separate
  projections (a packed QKV projection cannot tell K's width apart);
- ONNX ``Attention``: its optional ``qk_matmul_output`` (output 3, ``[batch, q_heads, q, kv]``),
  kv heads from the K input (4-D: dim 1; 3-D: width / head size);
- com.microsoft ``Attention``: ``present`` (``[2, batch, heads, len, head_size]``);
  ``MultiHeadAttention`` / ``GroupQueryAttention``: ``present_key`` (``[batch, kv_heads, len,
  head_size]``; query heads = output width / head size).

Synthetic inputs: symbolic dims are 2 for the batch (a dim named like "batch", else the first
input's first dim) and 8 for anything else, unless given in ``dims``; integer inputs feeding an
embedding ``Gather`` get ids in 0..min(vocab-1, 99), other integer inputs zeros; inputs whose
name contains "mask" get ones; float inputs small random normals (seeded).

No printing, no exit codes: failures to run become "unchecked" results with a reason.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mhainspect.errors import InputError, MissingDependencyError
from mhainspect.ir.graph import ModelGraph, Node
from mhainspect.ir.units import format_bytes, parse_size
from mhainspect.results import AttentionBlock, BlockVerification, Report, VerifyStatus

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = [
    "BlockVerification",
    "VerifyBudgetError",
    "attach",
    "check_budget",
    "default_max_verify_bytes",
    "format_bytes",
    "graph_input_symbols",
    "parse_size",
    "require_runtime",
    "verify_report",
    "weight_bytes",
]

DEFAULT_BATCH = 2
DEFAULT_SEQUENCE = 8
MAX_TOKEN_ID = 99
_EXTERNAL = 1  # TensorProto.EXTERNAL
_SUB_BYTE_BITS = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2}
_BATCH_NAMES = {"b", "n", "bs", "bsz"}
_SEQ_HINTS = ("seq", "len", "token", "time", "step", "past", "total")
# Ops an id tensor may pass through on its way to an embedding Gather.
_ID_PASSTHROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Slice", "Transpose"}


class VerifyBudgetError(InputError):
    """The weights alone exceed the --max-verify-bytes budget."""


# ----------------------------------------------------------------------------- budget


def default_max_verify_bytes() -> int | None:
    """Half of the machine's memory (or of the cgroup limit, when lower); None if unknown."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text(encoding="ascii").strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total // 2 if total > 0 else None


def _tensor_bytes(t: onnx.TensorProto) -> int:
    if t.data_location == _EXTERNAL:
        length = next((e.value for e in t.external_data if e.key == "length"), "")
        if length.isdigit():
            return int(length)
    if t.data_type == 8:  # STRING
        return sum(len(s) for s in t.string_data)
    numel = math.prod(max(int(d), 0) for d in t.dims)
    return (numel * _dtype_bits(t.data_type) + 7) // 8


def _dtype_bits(data_type: int) -> int:
    import onnx

    try:
        name = onnx.TensorProto.DataType.Name(data_type)
    except ValueError:
        return 32
    if name in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[name]
    try:
        return int(onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize) * 8
    except (KeyError, TypeError, ValueError):
        return 32


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sp in graph.sparse_initializer:
        yield sp.values
        yield sp.indices
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            if a.HasField("g"):
                yield from _graph_tensors(a.g)
            for g in a.graphs:
                yield from _graph_tensors(g)


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every initializer and constant (dims x dtype size; external data by its recorded
    length), computed from metadata: no tensor data is read."""
    return sum(_tensor_bytes(t) for t in _graph_tensors(model.graph))


def check_budget(path: str, max_bytes: int | None, model: onnx.ModelProto) -> int:
    """The weight bytes of ``model`` (read from ``path``); raises VerifyBudgetError when they exceed
    ``max_bytes``."""
    n = weight_bytes(model)
    if max_bytes is not None and n > max_bytes:
        raise VerifyBudgetError(
            f"{path}: --verify refused: the weights alone take {format_bytes(n)} ({n:,} bytes), over the "
            f"--max-verify-bytes budget of {format_bytes(max_bytes)}; raise the budget or drop --verify")
    return n


def require_runtime() -> None:
    try:
        import numpy  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        raise MissingDependencyError("--verify needs onnxruntime: pip install 'mhainspect[verify]'") from None


# ----------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class _Probe:
    """Which tensors to read for one block, and how (``kind``)."""

    kind: str  # "softmax", "onnx_attention", "ms_attention", "ms_present_key", "ms_gqa"
    anchor: str
    tensors: tuple[tuple[str, str], ...]  # (role, tensor name)
    optional: tuple[tuple[str, str], ...] = ()  # tensors readable only when top-level


@dataclass(frozen=True)
class _Reading:
    heads: int | None
    kv_heads: int | None
    detail: str  # what was read, or why nothing could be


class _RunError(Exception):
    """The model could not be run; the message becomes every block's reason."""


def _unique_nodes(graph_nodes: tuple[Node, ...]) -> dict[str, Node]:
    by_name: dict[str, Node] = {}
    dup: set[str] = set()
    for n in graph_nodes:
        if n.name in by_name:
            dup.add(n.name)
        by_name[n.name] = n
    for name in dup:
        del by_name[name]
    return by_name


def _plan(block: AttentionBlock, nodes: Mapping[str, Node], proto_nodes: Mapping[str, onnx.NodeProto],
          index: int) -> _Probe | str:
    """A probe for ``block``, or the reason none is possible. May add outputs to a proto node."""
    node = nodes.get(block.anchor)
    if node is None:
        return f"anchor node '{block.anchor}' not found (or its name is not unique)"
    domain = node.op_domain
    first = next((o for o in node.outputs if o), "")
    proto = proto_nodes.get(first)
    if proto is None:
        return f"{node.op} '{node.name}' runs inside a subgraph or function; its tensors cannot be model outputs"

    def output(position: int, role: str) -> str:
        while len(proto.output) <= position:
            proto.output.append("")
        if not proto.output[position]:
            proto.output[position] = f"mhainspect_verify_{index}_{role}"
        return str(proto.output[position])

    # K's width before any repeat_kv is the K projection's output: with the head size the run
    # implies (Q projection width / observed heads) it gives the kv heads.
    optional: tuple[tuple[str, str], ...] = ()
    roles = {p.role: p for p in block.projections}
    q, k = roles.get("q"), roles.get("k")
    if q is not None and k is not None and q.node != k.node:  # a packed QKV output mixes Q, K and V
        q_node, k_node = nodes.get(q.node), nodes.get(k.node)
        if q_node is not None and k_node is not None and q_node.outputs and k_node.outputs:
            optional = (("q_proj", q_node.outputs[0]), ("k_proj", k_node.outputs[0]))
    if node.op == "Softmax" and domain == "":
        return _Probe("softmax", node.name, (("probs", first),), optional)
    if domain == "" and node.op == "Attention":
        if len(node.inputs) < 2:
            return "Attention node without Q and K inputs"
        return _Probe("onnx_attention", node.name, (("qk", output(3, "qk")),),
                      optional + (("q", node.inputs[0]), ("k", node.inputs[1])))
    if domain == "com.microsoft" and node.op == "Attention":
        return _Probe("ms_attention", node.name, (("present", output(1, "present")),))
    if domain == "com.microsoft" and node.op == "MultiHeadAttention":
        return _Probe("ms_present_key", node.name, (("present_key", output(1, "present_key")),))
    if domain == "com.microsoft" and node.op == "GroupQueryAttention":
        return _Probe("ms_gqa", node.name, (("present_key", output(1, "present_key")), ("out", first)))
    return f"{domain + '.' if domain else ''}{node.op} exposes no per-head tensor to read"


def _kv_from_projections(t: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]], heads: int,
                         label: str) -> tuple[int | None, str]:
    if not heads or "q_proj" not in t or t["q_proj"] not in shapes or t["k_proj"] not in shapes:
        return None, label
    qw, kw = _width(shapes[t["q_proj"]]), _width(shapes[t["k_proj"]])
    head_size = qw // heads if qw % heads == 0 else 0
    if not head_size or kw % head_size:
        return None, label
    return kw // head_size, f"{label}; K projection width {kw} / head size {head_size}"


def _width(shape: tuple[int, ...]) -> int:
    """Feature width of a projection output: [B, L, W] -> W, [B, L, h, d] -> h*d, [N, W] -> W."""
    return math.prod(shape[2:]) if len(shape) >= 3 else (shape[-1] if shape else 0)


def _read(probe: _Probe, shapes: Mapping[str, tuple[int, ...]], batch: int | None) -> _Reading:
    """What the run's shape at ``probe`` says about the block's heads (and K/V heads)."""
    t = dict(probe.tensors + probe.optional)
    s = shapes[probe.tensors[0][1]]
    where = f"at {probe.anchor}"
    if probe.kind == "softmax":
        return _read_softmax(s, t, shapes, batch, where)
    if probe.kind == "onnx_attention":
        return _read_onnx_attention(s, t, shapes, where)
    if probe.kind == "ms_attention":
        label = f"present {list(s)} {where}"
        if len(s) != 5:
            return _Reading(None, None, f"{label}: not [2, batch, heads, len, head_size]")
        return _Reading(s[2], s[2], label)
    return _read_present_key(probe.kind, s, t, shapes, where)


def _read_softmax(s: tuple[int, ...], t: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
                  batch: int | None, where: str) -> _Reading:
    """Probabilities [batch, heads, q, kv], grouped [batch, kv_heads, group, q, kv], or folded [batch·heads, q, kv]."""
    label = f"probabilities {list(s)} {where}"
    heads: int | None
    kv: int | None = None
    if len(s) in (4, 5) and batch is not None and s[0] != batch:
        return _Reading(None, None, f"{label} are not [batch={batch}, heads, ...]")
    if len(s) == 4:
        heads = s[1]
    elif len(s) == 5:  # grouped: [batch, kv_heads, group, q_len, kv_len]
        heads, kv = s[1] * s[2], s[1]
    elif len(s) == 3:
        if batch is None:
            return _Reading(None, None, f"folded {label}: batch size unknown (no symbolic batch dim)")
        if s[0] % batch:
            return _Reading(None, None, f"folded {label}: dim 0 is not a multiple of batch {batch}")
        heads = s[0] // batch
        label = f"folded {label}, batch {batch}"
    else:
        return _Reading(None, None, f"{label}: rank {len(s)} is not [batch, heads, q_len, kv_len]")
    if kv is None:
        kv, label = _kv_from_projections(t, shapes, heads, label)
    return _Reading(heads, kv, label)


def _read_onnx_attention(s: tuple[int, ...], t: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
                         where: str) -> _Reading:
    """The Attention op's qk_matmul_output [batch, heads, q, kv]; K/V heads from the projections or K's width."""
    label = f"qk_matmul_output {list(s)} {where}"
    if len(s) != 4:
        return _Reading(None, None, f"{label}: not [batch, heads, q_len, kv_len]")
    heads = s[1]
    kv, label = _kv_from_projections(t, shapes, heads, label)
    q, k = shapes.get(t["q"]), shapes.get(t["k"])
    # A 4-D K input may come after repeat_kv (its dim 1 is then the query heads): not used.
    if kv is None and heads and q and k and len(q) == 3 and len(k) == 3 and q[2] % heads == 0:
        head_size = q[2] // heads
        if head_size and k[2] % head_size == 0:
            kv = k[2] // head_size
            label += f"; K width {k[2]} / head size {head_size}"
    return _Reading(heads, kv, label)


def _read_present_key(kind: str, s: tuple[int, ...], t: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
                      where: str) -> _Reading:
    """present_key [batch, kv_heads, len, head_size]; the query heads from the output's width."""
    label = f"present_key {list(s)} {where}"
    if len(s) != 4:
        return _Reading(None, None, f"{label}: not [batch, kv_heads, len, head_size]")
    if kind == "ms_present_key":
        return _Reading(s[1], s[1], label)
    out = shapes.get(t["out"])
    if out is None or len(out) != 3 or not s[3] or out[2] % s[3]:
        return _Reading(None, s[1], f"{label}: query heads not readable from the output")
    return _Reading(out[2] // s[3], s[1], f"{label}; output width {out[2]} / head size {s[3]}")


def _judge(block: AttentionBlock, reading: _Reading) -> BlockVerification:
    heads, kv = reading.heads, reading.kv_heads
    if not heads:  # None, or 0 from an empty tensor
        return BlockVerification(block.name, VerifyStatus.UNCHECKED, None, None, reading.detail)
    if block.num_heads is None:
        return BlockVerification(block.name, VerifyStatus.OBSERVED, heads, kv, f"observed at run time: {reading.detail}")
    seen = []
    if heads != block.num_heads:
        seen.append(f"saw {heads} heads, static {block.num_heads}")
    if kv is not None and block.num_kv_heads is not None and kv != block.num_kv_heads:
        seen.append(f"saw {kv} kv heads, static {block.num_kv_heads}")
    if seen:
        return BlockVerification(block.name, VerifyStatus.CONTRADICTED, heads, kv,
                                 "; ".join(seen) + f" ({reading.detail})", disagreement="; ".join(seen))
    return BlockVerification(block.name, VerifyStatus.CONFIRMED, heads, kv, reading.detail)


# ----------------------------------------------------------------------------- inputs


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for pos, name in enumerate(node.input):
            if name:
                users.setdefault(name, []).append((node, pos))
    return users


def _vocab(name: str, graph: onnx.GraphProto, users: Mapping[str, list[tuple[onnx.NodeProto, int]]]) -> int | None:
    """Rows of the smallest embedding table this integer input indexes (via Gather), if any."""
    dims = {t.name: tuple(int(d) for d in t.dims) for t in graph.initializer}
    found: list[int] = []
    frontier, seen = [name], {name}
    for _ in range(6):
        nxt: list[str] = []
        for tensor in frontier:
            for node, pos in users.get(tensor, []):
                if node.op_type == "Gather" and pos == 1 and node.input[0] in dims:
                    axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 0)
                    table = dims[node.input[0]]
                    if table and -len(table) <= axis < len(table) and table[axis] > 0:
                        found.append(table[axis])
                elif node.op_type in _ID_PASSTHROUGH and pos == 0:
                    nxt.extend(o for o in node.output if o and o not in seen)
                    seen.update(node.output)
        frontier = nxt
    return min(found) if found else None


def _is_batch_name(name: str) -> bool:
    low = name.lower()
    return "batch" in low or low in _BATCH_NAMES


def _synthesize(graph: onnx.GraphProto, dims: Mapping[str, int],
                overrides: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int | None]:
    """Feeds for every graph input, and the batch size used (None when no dim is the batch)."""
    import numpy as np

    inits = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in inits]
    shaped = [v for v in inputs if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")]
    shaped_names = {v.name for v in shaped}
    sizes = _Sizes(dims, shaped)
    rng = np.random.default_rng(0)
    users = _consumers(graph)
    feeds: dict[str, np.ndarray] = {}
    for v in inputs:
        if v.name in overrides:
            feeds[v.name] = np.asarray(overrides[v.name])
            continue
        if v.name not in shaped_names:
            raise _RunError(f"input '{v.name}' declares no tensor shape; cannot build a value for it")
        feeds[v.name] = _feed(v, sizes.shape(v), graph, users, rng)
    return feeds, sizes.batch


class _Sizes:
    """The sizes the run gives the graph inputs' dims: --dim values, else the batch or sequence
    default by what a dim is. The batch is the dim named like a batch, else the first input's
    first dim when it is dynamic and not named like a sequence."""

    def __init__(self, dims: Mapping[str, int], shaped: Sequence[onnx.ValueInfoProto]) -> None:
        self.dims = dims
        symbols = [d.dim_param for v in shaped for d in v.type.tensor_type.shape.dim if d.dim_param]
        self.batch_symbol = next((s for s in symbols if _is_batch_name(s)), None)
        self.first_axis0: str | None = None  # the input whose dim 0 is the batch, when no name says
        if self.batch_symbol is None:
            lead = next((v for v in shaped if v.type.tensor_type.shape.dim), None)
            if lead is not None:
                d0 = lead.type.tensor_type.shape.dim[0]
                if not d0.HasField("dim_value") and not any(h in d0.dim_param.lower() for h in _SEQ_HINTS):
                    self.first_axis0 = lead.name
                    self.batch_symbol = d0.dim_param or None
        self.batch: int | None = None  # the batch size used, once an input has the batch dim

    def symbol(self, sym: str) -> int:
        if sym in self.dims:
            return self.dims[sym]
        if "+" in sym:  # "past_sequence_length + sequence_length", "seq + 1"
            terms = [t.strip() for t in sym.split("+")]
            return sum(int(t) if t.isdigit() else self.symbol(t) for t in terms)
        return DEFAULT_BATCH if sym == self.batch_symbol else DEFAULT_SEQUENCE

    def shape(self, v: onnx.ValueInfoProto) -> list[int]:
        shape: list[int] = []
        for axis, d in enumerate(v.type.tensor_type.shape.dim):
            is_first_axis0 = self.first_axis0 == v.name and axis == 0
            if d.HasField("dim_value"):
                value = int(d.dim_value)
            elif d.dim_param:
                value = self.symbol(d.dim_param)
            else:  # an unnamed dynamic dim
                value = DEFAULT_BATCH if is_first_axis0 else DEFAULT_SEQUENCE
            if (d.dim_param and d.dim_param == self.batch_symbol) or is_first_axis0:
                self.batch = value
            shape.append(value)
        return shape


def _feed(v: onnx.ValueInfoProto, shape: list[int], graph: onnx.GraphProto,
          users: Mapping[str, list[tuple[onnx.NodeProto, int]]], rng: np.random.Generator) -> np.ndarray:
    """A value for input ``v``: ones for a mask or bool, token ids within the embedding it indexes,
    small normal floats."""
    import numpy as np
    import onnx

    elem = v.type.tensor_type.elem_type
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    except (KeyError, TypeError, ValueError):
        raise _RunError(f"input '{v.name}' has an element type ({elem}) --verify cannot build") from None
    kind = np.dtype(dtype).kind
    if "mask" in v.name.lower() or kind == "b":
        return np.ones(shape, dtype=dtype)
    if kind in "iu":
        vocab = _vocab(v.name, graph, users)
        high = min(vocab - 1, MAX_TOKEN_ID) if vocab else 0
        return rng.integers(0, high + 1, size=shape).astype(dtype)
    if kind == "f":
        return (rng.standard_normal(shape) * 0.1).astype(dtype)
    raise _RunError(f"input '{v.name}' has type {np.dtype(dtype).name}, which --verify cannot build")



# ----------------------------------------------------------------------------- run


def _external_locations(model: onnx.ModelProto) -> set[str]:
    return {e.value for t in _graph_tensors(model.graph) if t.data_location == _EXTERNAL
            for e in t.external_data if e.key == "location"}


def _check_external_data(model_dir: Path, locations: set[str]) -> None:
    for location in sorted(locations):
        if not (model_dir / location).is_file():
            raise _RunError(f"external data file '{location}' not found next to the model")


def _summary(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : ", "", text)
    text = re.sub(r"^Load model from \S+ failed: ?", "", text)  # the temporary copy's path means nothing
    text = re.sub(r"\S*onnxruntime_src/\S+:\d+ (?:[\w:~<>&*, ]+\([^)]*\) )?", "", text)  # C++ source location
    return text if len(text) <= 240 else text[:237] + "..."


def _run(model: onnx.ModelProto, model_dir: Path, feeds: Mapping[str, np.ndarray],
         fetch: list[str]) -> dict[str, tuple[int, ...]]:
    """Run a modified copy in a temp dir; return the shapes of ``fetch``. The dir is always removed."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="mhainspect-verify-") as tmp_name:
        locations = _external_locations(model)
        _check_external_data(model_dir, locations)
        path = Path(tmp_name) / "model.onnx"
        path.write_bytes(model.SerializeToString())
        options = ort.SessionOptions()
        options.log_severity_level = 4
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        if locations:  # read the weights where they are: no copy, and the user's folder is not written
            options.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                             str(model_dir.resolve()))
        run_options = ort.RunOptions()
        run_options.log_severity_level = 4
        session = None
        try:
            session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
            results = session.run(fetch, dict(feeds), run_options)
            return {name: tuple(int(d) for d in r.shape) for name, r in zip(fetch, results)}
        finally:
            del session


def verify_report(model: onnx.ModelProto, graph: ModelGraph, model_dir: Path, report: Report, *,
                  dims: Mapping[str, int] | None = None,
                  inputs: Mapping[str, Any] | None = None) -> tuple[BlockVerification, ...]:
    """One result per block of ``report`` (same order), from one onnxruntime run of ``model``.

    The pipeline reads the file (``mhainspect.pipeline.verify``) and hands over the parsed model,
    its graph in the IR and the folder its external data lies in; the run adds outputs to
    ``model``. ``dims`` sets symbolic input dims by name; ``inputs`` supplies values for inputs that
    cannot be synthesised (e.g. a reshape target). Loads external data; never writes the model's
    folder. Raises InputError only when onnxruntime is missing.
    """
    if not report.blocks:
        return ()
    require_runtime()
    nodes = _unique_nodes(graph.nodes)
    proto_nodes = {o: n for n in model.graph.node for o in n.output if o}
    plans = [_plan(b, nodes, proto_nodes, i) for i, b in enumerate(report.blocks)]

    inits = {t.name: tuple(int(d) for d in t.dims) for t in model.graph.initializer}
    try:
        feeds, batch = _synthesize(model.graph, dims or {}, inputs or {})
    except _RunError as exc:
        return _all_unchecked(report, plans, f"no inputs: {exc}")
    known: dict[str, tuple[int, ...]] = {**inits, **{k: tuple(v.shape) for k, v in feeds.items()}}
    fetch = _fetch_list(model, plans, known)
    try:
        shapes = {**known, **_run(model, model_dir, feeds, fetch)} if fetch else known
    except _RunError as exc:
        return _all_unchecked(report, plans, str(exc))
    except Exception as exc:  # onnxruntime raises its own types; none may escape as a traceback
        return _all_unchecked(report, plans, f"model did not run in onnxruntime: {_summary(exc)}")
    return tuple(_verdict(block, plan, shapes, batch) for block, plan in zip(report.blocks, plans))


def _fetch_list(model: onnx.ModelProto, plans: Sequence[_Probe | str], known: Mapping[str, tuple[int, ...]]
                ) -> list[str]:
    """The tensors the probes read that only the run gives, each added to the model's outputs."""
    import onnx

    producible = {o for n in model.graph.node for o in n.output if o} | set(known)  # incl. outputs _plan added
    fetch: list[str] = []
    for plan in plans:
        if isinstance(plan, _Probe):
            for _, name in plan.tensors + plan.optional:
                if name in producible and name not in known and name not in fetch:
                    fetch.append(name)
    existing = {o.name for o in model.graph.output}
    for name in fetch:
        if name not in existing:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    return fetch


def _verdict(block: AttentionBlock, plan: _Probe | str, shapes: Mapping[str, tuple[int, ...]],
             batch: int | None) -> BlockVerification:
    """The block's result: unchecked with the plan's reason or a tensor the run did not produce,
    else what the probe's shapes say against the static figures."""
    if isinstance(plan, str):
        return BlockVerification(block.name, VerifyStatus.UNCHECKED, reason=plan)
    if any(name not in shapes for _, name in plan.tensors):
        return BlockVerification(block.name, VerifyStatus.UNCHECKED, reason=f"tensor at {plan.anchor} not produced")
    return _judge(block, _read(plan, shapes, batch))


def _all_unchecked(report: Report, plans: list[_Probe | str], reason: str) -> tuple[BlockVerification, ...]:
    return tuple(BlockVerification(b.name, VerifyStatus.UNCHECKED, reason=p if isinstance(p, str) else reason)
                 for b, p in zip(report.blocks, plans))


def attach(report: Report, verifications: tuple[BlockVerification, ...]) -> Report:
    """``report`` with each block's ``verification`` set (matched by position)."""
    if not verifications:
        return report
    blocks = tuple(dataclasses.replace(b, verification=v) for b, v in zip(report.blocks, verifications))
    return dataclasses.replace(report, blocks=blocks + report.blocks[len(blocks):])


def graph_input_symbols(model: onnx.ModelProto) -> frozenset[str]:
    """The symbolic dimension names of a model's graph inputs."""
    return frozenset(d.dim_param for v in model.graph.input if v.type.HasField("tensor_type")
                     for d in v.type.tensor_type.shape.dim if d.dim_param)
