"""Generality probe: every attention architecture the installed transformers ships, as a tiny
random Hugging Face folder, audited by mhainspect and compared with the torch module.

Not part of the test suite (it builds hundreds of models). For each ``model_type`` with a base
model class (``AutoModel``): a small config (hidden 64, 2 layers, 4 heads over 2 K/V heads and an
explicit ``head_dim`` of 24 where the config has one, so h·d_k ≠ d_model), noise on every
parameter, ``save_pretrained`` (config.json + safetensors) under a temporary folder, then
``mhainspect.inspect(folder)``. Ground truth comes from the built module: its attention modules
(classes named ``*Attention``, outermost, not a layer wrapper), the heads, K/V heads and head size
the module (or its config) holds, and the parameters of its projections. Verdict per model:

* exact   -- every attention module paired with a block whose heads, K/V heads, d_k and total
             equal the module's (total: its projection parameters, or all its parameters);
* wrong   -- a paired block with a different figure;
* missed  -- an attention module with no block and no stated reason;
* mixer   -- a module named as attention that the report lists as a linear-attention, state-space
             or convolution mixer (no softmax attention, a fixed state);
* refused -- no block, or no head count, and the report says why (a near miss, heads unknown with
             its reason);
* extra   -- blocks with no attention module behind them;
* none    -- no attention module in the model (controls);
* skipped -- the model could not be built here (extra package, config the probe cannot shrink).

Run:  python scripts/probe_architectures.py [--only TYPE ...] [--json OUT] [--markdown OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import re
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS, FFN, VOCAB = 64, 4, 2, 24, 2, 128, 256
MAX_PARAMS = 40_000_000
TIMEOUT_S = 90

# Config keys the probe shrinks, by what they mean; each is set only where the config class has it.
SIZES: dict[str, int] = {
    "hidden_size": HIDDEN, "d_model": HIDDEN, "n_embd": HIDDEN, "embed_dim": HIDDEN, "dim": HIDDEN,
    "num_hidden_layers": LAYERS, "num_layers": LAYERS, "n_layer": LAYERS, "n_layers": LAYERS,
    "encoder_layers": LAYERS, "decoder_layers": LAYERS, "num_decoder_layers": LAYERS,
    "num_encoder_layers": LAYERS,
    "num_attention_heads": HEADS, "n_head": HEADS, "n_heads": HEADS, "num_heads": HEADS,
    "encoder_attention_heads": HEADS, "decoder_attention_heads": HEADS, "attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS, "num_kv_heads": KV_HEADS, "n_kv_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
    "intermediate_size": FFN, "ffn_dim": FFN, "encoder_ffn_dim": FFN, "decoder_ffn_dim": FFN, "n_inner": FFN,
    "d_ff": FFN, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "vocab_size": VOCAB, "depth": LAYERS, "encoder_depth": LAYERS, "decoder_depth": LAYERS,
}
# Fallbacks when the full shrink does not build: drop the explicit head size, then the GQA.
TIERS: tuple[tuple[str, ...], ...] = ((), ("head_dim",), ("head_dim", "num_key_value_heads", "num_kv_heads",
                                                          "n_kv_heads"),
                                      ("head_dim", "num_key_value_heads", "num_kv_heads", "n_kv_heads",
                                       "vocab_size"))

HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_head", "n_heads", "attention_heads", "num_head", "heads")
KV_ATTRS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "kv_heads", "num_kv")
DIM_ATTRS = ("qk_head_dim", "head_dim", "attention_head_size", "head_size", "d_kv", "key_value_proj_dim", "dim_head", "d_head",
             "head_dimension")


class Timeout(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def fire(*_: Any) -> None:
        raise Timeout(f"over {seconds}s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _fields(cls: Any) -> set[str]:
    names: set[str] = set()
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    import inspect

    with contextlib.suppress(TypeError, ValueError):
        names |= set(inspect.signature(cls.__init__).parameters)
    return names


def shrink(cls: Any, drop: tuple[str, ...]) -> dict[str, Any]:
    """Constructor kwargs of ``cls`` (and of its sub-configs, as dicts) that make it small. A
    sub-config the class builds by type (``AutoConfig``) is shrunk as the type its default is."""
    have = _fields(cls)
    kwargs: dict[str, Any] = {k: v for k, v in SIZES.items() if k in have and k not in drop}
    subs = getattr(cls, "sub_configs", None) or {}
    default = None
    if subs:
        with contextlib.suppress(Exception):
            default = cls()
    for key, sub in subs.items():
        if key not in have:
            continue
        made = getattr(default, key, None)
        if made is not None and hasattr(made, "model_type") and not isinstance(made, dict):
            kwargs[key] = {"model_type": made.model_type, **shrink(type(made), drop)}
        elif isinstance(sub, type) and getattr(sub, "model_type", ""):
            kwargs[key] = shrink(sub, drop)
    return kwargs


def build(model_type: str) -> tuple[Any, Any, str]:
    """(model, config, tier note) or raise. The model is first built on the meta device, so that
    one the probe's sizes leave large is refused before it takes memory."""
    import torch
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    errors = []
    for drop in TIERS:
        try:
            config = cls(**shrink(cls, drop))
            with contextlib.suppress(Exception):
                config._attn_implementation = "eager"
            with torch.device("meta"):
                meta = transformers.AutoModel.from_config(config)
            n = sum(p.numel() for p in meta.parameters())
            del meta
            if n > MAX_PARAMS:
                raise TooLarge(f"{n:,} parameters at the probe's sizes")
            torch.manual_seed(0)
            model = transformers.AutoModel.from_config(config)
            return model, config, ("full" if not drop else "without " + ",".join(d for d in drop if d in
                                                                               _fields(cls)) or "-")
        except (ImportError, TooLarge):
            raise
        except Exception as exc:  # noqa: BLE001 -- a config the probe's sizes do not fit: try fewer
            errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")
    raise RuntimeError("; ".join(errors[-1:]))


class TooLarge(Exception):
    pass


def add_noise(model: Any) -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)


def _attention_class(mod: Any) -> bool:
    name = type(mod).__name__
    return bool(re.search(r"attention|attn", name, re.I)) and not re.search(
        r"layer$|block$|Layer[A-Z]|DecoderLayer|EncoderLayer|Rotary|Embedding|Norm$|Mask|Output$|Pool|Intermediate|"
        r"Merger$|Residual$|MLP$", name, re.I)


def _linear_params(mod: Any) -> int:
    """Parameters of the projection-like modules below ``mod``: 2-D weights (Linear, Conv1D, 1x1 convs)
    and their biases."""
    total = 0
    for sub in mod.modules():
        w = getattr(sub, "weight", None)
        if w is None or not hasattr(w, "dim") or sub is None:
            continue
        if type(sub).__name__ in ("Embedding",) or "norm" in type(sub).__name__.lower():
            continue
        if w.dim() >= 2:
            total += w.numel()
            b = getattr(sub, "bias", None)
            if b is not None and hasattr(b, "numel"):
                total += b.numel()
    return total


def _attr(mod: Any, names: tuple[str, ...]) -> int | None:
    for sub in [mod, *mod.modules()]:
        for n in names:
            v = getattr(sub, n, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


def _cfg_attr(cfg: Any, names: tuple[str, ...]) -> int | None:
    for n in names:
        v = getattr(cfg, n, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


@dataclasses.dataclass
class Truth:
    scope: str
    cls: str
    heads: int | None
    kv_heads: int | None
    d_k: int | None
    proj_params: int
    all_params: int
    without_norms: int  # all its parameters but its norms' (DeBERTa's q_bias/v_bias are neither)


def _container(mod: Any) -> bool:
    """A module named as attention that holds a stack of layers with attention modules in them (SAM 2/3's
    memory attention: ``layers.N.self_attn``, ``layers.N.cross_attn_image``): those are the attention,
    not it. An attention module with one inner one (BERT's self-attention beside its output) or with
    projections of its own named as attention (CvT's convolution projections) stays one."""
    inner = [n for n, m in mod.named_modules() if n and _attention_class(m) and _linear_params(m)]
    layered = [n for n in inner if any(c.isdigit() for c in n.split("."))]
    return len(layered) >= 2


def truths(model: Any, config: Any) -> list[Truth]:
    out: list[Truth] = []
    taken: list[str] = []
    for name, mod in model.named_modules():
        if not name or not _attention_class(mod):
            continue
        if any(name.startswith(t + ".") for t in taken):
            continue
        own = sum(p.numel() for p in mod.parameters())
        if own == 0 or _linear_params(mod) == 0:
            continue
        if _container(mod):  # a stack of attention layers named as attention (SAM 3's memory attention)
            continue
        taken.append(name)
        cfg = getattr(mod, "config", None) or config
        heads = _attr(mod, HEAD_ATTRS) or _cfg_attr(cfg, HEAD_ATTRS)
        groups = _attr(mod, ("num_key_value_groups",))
        kv = _attr(mod, KV_ATTRS) or (heads // groups if heads and groups else None) or _cfg_attr(cfg, KV_ATTRS)
        d_k = _attr(mod, DIM_ATTRS) or _cfg_attr(cfg, ("head_dim",))
        k_proj = next((getattr(mod, n) for n in ("k_proj", "key", "k") if hasattr(getattr(mod, n, None), "weight")),
                      None)
        q_proj = next((getattr(mod, n) for n in ("q_proj", "query", "q") if hasattr(getattr(mod, n, None), "weight")),
                      None)
        if heads is None and q_proj is not None and d_k and q_proj.weight.dim() == 2 and \
                q_proj.weight.shape[0] % d_k == 0:
            heads = q_proj.weight.shape[0] // d_k  # no head attribute (RF-DETR's decoder): Q's own width says
        if k_proj is not None and d_k and k_proj.weight.dim() == 2 and k_proj.weight.shape[0] % d_k == 0:
            kv = k_proj.weight.shape[0] // d_k  # the K projection's own width says how many K/V heads
        if getattr(mod, "kv_b_proj", None) is not None:  # latent attention: K and V up-projected per query head
            kv = heads
        if type(mod).__name__ == "MultiheadAttention" and type(mod).__module__.startswith("torch.nn"):
            kv = heads  # torch's nn.MultiheadAttention has as many K/V heads as query heads, whatever the config says
        norms = sum(p.numel() for m in mod.modules() if "norm" in type(m).__name__.lower()
                    for p in m.parameters(recurse=False))
        out.append(Truth(name, type(mod).__name__, heads, kv or heads, d_k, _linear_params(mod), own, own - norms))
    return out


@dataclasses.dataclass
class Row:
    model_type: str
    verdict: str
    note: str = ""
    expected: str = ""
    found: str = ""
    tier: str = ""
    details: list[str] = dataclasses.field(default_factory=list)
    kv_status: str = ""


def _digits(path: str) -> tuple[str, ...]:
    return tuple(c for c in path.split(".") if c.isdigit())


def _pair(scope: str, blocks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The block of the attention module at ``scope``: the same name, or (a checkpoint saves some
    modules under older names: ``layers`` -> ``layer``, ``vision_model.layers`` ->
    ``vision_model.transformer.resblocks``) a block of the same sub-model (the first path component),
    else of any, with the same layer numbers (else the same last one) and the most alike name."""
    named = _named(scope, blocks)
    if named is not None:
        return named
    top = scope.split(".")[0]
    for pool in ([b for b in blocks if b["name"].split(".")[0] == top], blocks):
        found = _pair_by_numbers(scope, pool)
        if found is not None:
            return found
    # Keys renamed on saving (a model's original checkpoint names: ``text_encoder.transformer.resblocks``
    # for ``text_model.encoder.layers``): the same layer numbers in the same tower, the first the
    # earlier modules of that layer left, in the report's order.
    tower, digits = _words(scope.split(".")[0]), _digits(scope)
    kin = [b for b in blocks if digits and _digits(b["name"])[-len(digits):] == digits
           and tower & _words(b["name"].split(".")[0])]
    return kin[0] if kin else None


def _pair_by_numbers(scope: str, blocks: list[dict[str, Any]]) -> dict[str, Any] | None:
    import difflib

    digits = _digits(scope)
    pools = [[b for b in blocks if _digits(b["name"]) == digits]]
    if digits:
        pools.append([b for b in blocks if _digits(b["name"])[-1:] == digits[-1:]])
    for same in pools:
        if len(same) == 1 and digits:
            return same[0]
        scored = sorted(((difflib.SequenceMatcher(None, scope, b["name"]).ratio(), i) for i, b in enumerate(same)),
                        reverse=True)
        if scored and scored[0][0] > 0.7:
            return same[scored[0][1]]
    return None


def _named(scope: str, blocks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The block named as the module at ``scope``, inside it or around it, else the one block named as it
    under one more prefix (saved as ``transformer.decoder.layers.0.self_attn``)."""
    for b in blocks:
        n = b["name"]
        if n == scope or n.startswith(scope + ".") or scope.startswith(n + "."):
            return b
    tail = [b for b in blocks if b["name"].endswith("." + scope)]
    return tail[0] if len(tail) == 1 else None


def _words(component: str) -> set[str]:
    return {w for w in re.split(r"[^a-z]+", component.lower()) if len(w) > 2} - {"model"}


def _summary(items: list[tuple[Any, ...]]) -> str:
    seen: dict[tuple[Any, ...], int] = {}
    for it in items:
        seen[it] = seen.get(it, 0) + 1
    return "; ".join(f"{n}x {'/'.join('?' if v is None else str(v) for v in key)}" for key, n in seen.items())


def judge(model_type: str, truth: list[Truth], report: dict[str, Any]) -> Row:
    blocks = list(report["blocks"])
    misses = list(report.get("misses", []))
    mixers = report["model"].get("mixers") or []
    kv = report["model"].get("kv_cache") or {}
    kv_status = f"{kv.get('status')}" + (f" ({kv.get('reason')})" if kv.get("reason") else "")
    expected = _summary([(t.heads, t.kv_heads, t.d_k, t.proj_params) for t in truth])
    found = _summary([(b["num_heads"], b["num_kv_heads"], b["d_k"], b["params"]["total"]) for b in blocks])
    row = Row(model_type, "exact", expected=f"{len(truth)} blocks: {expected}",
              found=f"{len(blocks)} blocks: {found}", kv_status=kv_status)
    if not truth:
        row.verdict = "none" if not blocks else "extra"
        return row
    used: set[str] = set()
    worst = 0
    order = ["exact", "mixer", "refused", "wrong", "missed"]
    # Blocks named as their module (or as it under one more prefix) first, so that a looser pairing of
    # an earlier module does not take them.
    direct = {t.scope: b for t in truth if (b := _named(t.scope, blocks)) is not None}
    reserved = {b["name"] for b in direct.values()}
    for t in truth:
        b = direct.get(t.scope)
        if b is None or b["name"] in used:
            b = _pair(t.scope, [x for x in blocks if x["name"] not in used and x["name"] not in reserved])
        if b is None:
            # a near miss names its module as its anchor (misses[].anchor)
            miss = next((m for m in misses if (a := m.get("anchor") or m.get("scope") or "") and (
                a == t.scope or a.startswith(t.scope + ".") or t.scope.startswith(a + ".")
                or a.endswith("." + t.scope))), None)
            layer = int(_digits(t.scope)[0]) if _digits(t.scope) else None
            mixer = next((m for m in mixers if layer in m.get("layers", ())), None)
            if mixer is not None:
                row.details.append(f"{t.scope} ({t.cls}): listed as a mixer ({mixer.get('kind')}), no softmax attention")
                worst = max(worst, 1)
            elif miss is not None:
                row.details.append(f"{t.scope}: refused: {miss.get('reason')}")
                worst = max(worst, 2)
            else:
                row.details.append(f"{t.scope} ({t.cls}): missed")
                worst = max(worst, 4)
            continue
        used.add(b["name"])
        if b["num_heads"] is None:
            row.details.append(f"{t.scope}: heads unknown: {b.get('unknown_reason')}")
            worst = max(worst, 2)
            continue
        diffs = []
        if b["num_heads"] != t.heads:
            diffs.append(f"heads {b['num_heads']} vs {t.heads}")
        if b["num_kv_heads"] != t.kv_heads:
            diffs.append(f"kv {b['num_kv_heads']} vs {t.kv_heads}")
        if t.d_k is not None and b["d_k"] != t.d_k:
            diffs.append(f"d_k {b['d_k']} vs {t.d_k}")
        total = b["params"]["total"]
        # Q/K norms held by the module count in the block (matchers.grouping): projections + norms too.
        if total not in (t.proj_params, t.all_params, t.without_norms,
                         t.proj_params + t.all_params - t.without_norms):
            diffs.append(f"total {total} vs proj {t.proj_params} / all {t.all_params}")
        if diffs:
            row.details.append(f"{t.scope} ({t.cls}) as {b['name']}: " + ", ".join(diffs))
            worst = max(worst, 3)
    extra = [b["name"] for b in blocks if b["name"] not in used]
    if extra:
        row.details.append("extra blocks: " + ", ".join(extra[:4]) + (" ..." if len(extra) > 4 else ""))
    row.verdict = order[worst] if not (worst == 0 and extra) else "extra"
    if mixers:
        row.note = "mixers: " + ", ".join(sorted({str(m.get("kind")) for m in mixers}))
    return row


def probe(model_type: str, root: Path) -> Row:
    import mhainspect

    try:
        with deadline(TIMEOUT_S), warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            model, config, tier = build(model_type)
            add_noise(model)
            truth = truths(model, config)
            folder = root / model_type
            model.save_pretrained(folder)
    except ImportError as exc:
        return Row(model_type, "skipped", "needs " + str(exc).splitlines()[0][:120])
    except TooLarge as exc:
        return Row(model_type, "skipped", str(exc))
    except Exception as exc:  # noqa: BLE001
        return Row(model_type, "skipped", f"not built: {type(exc).__name__}: {str(exc)[:140]}")
    try:
        with deadline(TIMEOUT_S):
            report = mhainspect.inspect(str(folder)).to_dict()
    except Exception as exc:  # noqa: BLE001 -- the tool failing is a finding
        return Row(model_type, "crash", f"{type(exc).__name__}: {exc}"[:200], tier=tier,
                   details=traceback.format_exc().splitlines()[-4:])
    row = judge(model_type, truth, report)
    row.tier = tier
    return row


def model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "probe.md"
CONFORMANCE = ROOT / "docs" / "conformance.md"
BEGIN = "<!-- probe-report:begin (scripts/probe_architectures.py) -->"
END = "<!-- probe-report:end -->"
COMMAND = "python scripts/probe_architectures.py --write"
VERDICTS = ("exact", "mixer", "refused", "wrong", "missed", "extra", "crash", "none", "skipped")


def _counts(rows: list[Row]) -> dict[str, int]:
    return {v: n for v in VERDICTS if (n := sum(1 for r in rows if r.verdict == v))}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _versions() -> str:
    import torch
    import transformers

    return f"transformers {transformers.__version__}, torch {torch.__version__}"


def table(rows: list[Row]) -> str:
    """The generated part of docs/probe.md: counts, then one row per model type built."""
    counts = _counts(rows)
    lines = [BEGIN, "", f"{len(rows)} model types ({_versions()}): "
             + ", ".join(f"{v} {n}" for v, n in counts.items()) + ".", "",
             "| model_type | verdict | expected (blocks: n× heads/kv heads/d_k/params) | found | detail |",
             "|---|---|---|---|---|"]
    for r in rows:
        if r.verdict in ("skipped", "none"):
            continue
        lines.append(f"| {r.model_type} | {r.verdict} | {_cell(r.expected)} | {_cell(r.found)} | "
                     f"{_cell('; '.join(r.details))[:400]} |")
    skipped = [r for r in rows if r.verdict == "skipped"]
    none = [r.model_type for r in rows if r.verdict == "none"]
    lines += ["", f"No attention module at the probe's sizes ({len(none)}): " + ", ".join(none) + ".", "",
              f"Not built ({len(skipped)}): " + "; ".join(f"{r.model_type} ({_cell(r.note)[:90]})" for r in skipped)
              + ".", "", END]
    return "\n".join(lines) + "\n"


def section(rows: list[Row]) -> str:
    """The short section docs/conformance.md carries."""
    counts = _counts(rows)
    judged = sum(n for v, n in counts.items() if v not in ("skipped", "none"))
    return "\n".join([
        BEGIN, "## Every transformers architecture as a Hugging Face folder", "",
        "Generated by `scripts/probe_architectures.py`; do not edit by hand. Regenerate with", "",
        "```sh", COMMAND, "```", "",
        f"Every model type of the installed transformers with a base model ({_versions()}) built from its "
        "own config at a tiny size (hidden 64, 2 layers, 4 heads over 2 K/V heads, `head_dim` 24 where the "
        "config has one), noise on every parameter, saved as a folder (config.json + safetensors) and "
        "audited; the truth is the built model's attention modules. "
        f"{len(rows)} types, {judged} with attention modules judged: "
        + ", ".join(f"{v} {n}" for v, n in counts.items())
        + ". The table, what each verdict means and why the rows that are not exact are so: "
        "[probe.md](probe.md).", "", END, ""])


def splice(doc: str, text: str) -> str:
    """Replace the marked section of ``doc`` (or append it)."""
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        return head + text.rstrip("\n") + rest.split(END, 1)[1]
    return doc.rstrip("\n") + "\n\n" + text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="model types (default: every AutoModel type)")
    ap.add_argument("--json", type=Path, help="write the rows as JSON lines")
    ap.add_argument("--rows", type=Path, help="render the rows of an earlier --json run instead of probing")
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.name}'s table and {CONFORMANCE.name}'s section")
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args(argv)
    import transformers

    transformers.logging.set_verbosity_error()
    rows: list[Row] = []
    if args.rows:
        rows = [Row(**json.loads(line)) for line in args.rows.read_text().splitlines() if line.strip()]
    else:
        types = args.only or model_types()
        out = args.json.open("w") if args.json else None
        with tempfile.TemporaryDirectory(prefix="mha-probe-") as tmp:
            for mt in types:
                t0 = time.perf_counter()
                row = probe(mt, Path(tmp))
                rows.append(row)
                if out:
                    out.write(json.dumps(dataclasses.asdict(row)) + "\n")
                    out.flush()
                print(f"{mt:32} {row.verdict:8} {time.perf_counter() - t0:5.1f}s {row.note[:100]}", file=sys.stderr)
                if args.verbose:
                    for d in row.details:
                        print("    " + d, file=sys.stderr)
    if args.write:
        PAGE.write_text(splice(PAGE.read_text(encoding="utf-8") if PAGE.exists() else "", table(rows)),
                        encoding="utf-8")
        CONFORMANCE.write_text(splice(CONFORMANCE.read_text(encoding="utf-8"), section(rows)), encoding="utf-8")
        print(f"wrote {PAGE} and {CONFORMANCE}", file=sys.stderr)
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
