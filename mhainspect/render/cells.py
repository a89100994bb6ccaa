"""Plain-text cells shared by the tabular renderers (terminal table, markdown). No rich here."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from mhainspect.analysis.gates import GateResult
from mhainspect.analysis.whatif import KV_RULE, kv_heads_note
from mhainspect.ir.units import format_bytes, group, human_count
from mhainspect.render.grouping import BlockGroup, common_prefix, group_blocks, join_names
from mhainspect.results import AttentionBlock, BlockVerification, CacheStatus, ModelSummary, Report, VerifyStatus

__all__ = ["GROUPED_NOTE", "MODEL_COLUMNS", "UNKNOWN", "block_cells", "block_groups", "kv_cell", "model_cells", "model_names", "blocks_word", "format_label", "gate_line", "head_count_lines", "heads_label",
           "ignored_line", "kind_label", "percent", "source_facts", "verify_label", "what_if_rows"]

# One display name per source format (the JSON keeps the format's own key).
_FORMAT_LABELS = {"onnx": "ONNX", "torch": "PyTorch module", "pytorch": "PyTorch checkpoint",
                  "safetensors": "safetensors", "huggingface": "Hugging Face", "gguf": "GGUF", "keras": "Keras",
                  "keras-h5": "Keras HDF5"}
# Formats whose "producer" is the model's architecture (from its config or metadata), not a tool.
_ARCHITECTURE_FORMATS = frozenset({"huggingface", "gguf", "safetensors", "pytorch", "keras", "keras-h5"})
_NAMED_ARCHITECTURE = re.compile(r"^(?P<name>.+) \((?P<arch>[^()]+)\)$")  # GGUF: 'general.name (architecture)'


def format_label(fmt: str) -> str:
    return _FORMAT_LABELS.get(fmt, fmt)


def producer_facts(m: ModelSummary) -> list[str]:
    """'producer pytorch 2.3.0' for a graph; 'architecture LlamaForCausalLM' where the field holds
    the architecture a config or GGUF metadata names ('Llama 3 8B', 'architecture llama')."""
    if not m.producer:
        # A graph whose file names no producer (paddle2onnx leaves producer_name empty): said, so the
        # header is not read as "this field was not looked at".
        return ["producer unknown (the file names none)"] if m.format == "onnx" else []
    if m.format not in _ARCHITECTURE_FORMATS:
        return [f"producer {m.producer}"]
    named = _NAMED_ARCHITECTURE.match(m.producer) if m.format == "gguf" else None
    if named:
        return [named["name"], f"architecture {named['arch']}"]
    return [f"architecture {m.producer}"]


def source_facts(m: ModelSummary) -> list[str]:
    """What this source has besides its format: opset, producer or architecture, node count (only those it has)."""
    facts = []
    if m.opset is not None:
        facts.append(f"opset {m.opset}")
    facts.extend(producer_facts(m))
    if m.num_nodes:
        facts.append(f"{'traced nodes' if m.format == 'torch' else 'nodes'} {group(m.num_nodes)}")
    return facts


def blocks_word(n: int) -> str:
    return f"{n} block" if n == 1 else f"{n} blocks"

UNKNOWN = "?"  # a number the analysis could not determine


def heads_label(block: AttentionBlock) -> str:
    """'8', '8/2 kv' for grouped/multi-query attention, '?' when unknown."""
    if block.num_heads is None:
        return UNKNOWN
    if block.num_kv_heads is not None and block.num_kv_heads != block.num_heads:
        return f"{block.num_heads}/{block.num_kv_heads} kv"
    return str(block.num_heads)


def kind_label(block: AttentionBlock) -> str:
    """'self', 'cross', ...; 'self ×12' for one module whose weights a run applies 12 times."""
    return block.kind if block.applications == 1 else f"{block.kind} ×{block.applications}"


def _opt(value: int | None) -> str:
    return UNKNOWN if value is None else str(value)


def percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.2f}" if whole else "-"


def block_cells(b: AttentionBlock, model_total: int, *, exact: bool = True) -> tuple[str, ...]:
    """One block's row, in _COLUMNS order; shared by every tabular renderer. Counts are exact
    (1,050,624); ``exact=False`` abbreviates them (1.05M) for a terminal too narrow for them."""
    p = b.params
    n = group if exact else human_count
    q, k, v, o = b.role_weights()  # without biases: Q + K + V + O + Bias = Total (with a latent block's part)
    return (b.name, kind_label(b), heads_label(b), _opt(b.d_model), _opt(b.d_k), _opt(b.d_v), n(q),
            n(k), n(v), n(o), n(p.bias), n(p.total), percent(p.total, model_total))


# Said under a table with folded rows, in every text format.
GROUPED_NOTE = "×N: N blocks with the same numbers (each) on one row; --no-group lists them one by one."


def block_groups(report: Report, group_repeats: bool = True) -> list[BlockGroup]:
    """A block table's rows: blocks with every cell the same (layers 0–31 of one layout) are one row."""
    total = report.model.total_params
    return group_blocks(report.blocks, lambda b: block_cells(b, total)[1:], group=group_repeats)


def head_count_lines(report: Report) -> list[str]:
    """Per kind of layout, one sentence: does the head count change these blocks' counts?

    With h·d_k = d_model the heads only split projections of a fixed width (the count stays the
    same at any head count); otherwise the widths are h·d_k and follow the head count (MHA001)."""
    fixed: list[str] = []
    follows: list[AttentionBlock] = []
    unknown: list[str] = []
    for b in report.blocks:
        if b.num_heads is None or b.d_k is None or b.d_model is None:
            unknown.append(b.name)
        elif b.num_heads * b.d_k == b.d_model:
            fixed.append(b.name)
        else:
            follows.append(b)
    lines = []
    if fixed:
        these = "this block" if len(fixed) == 1 else f"these {len(fixed)} blocks"
        lines.append(f"The head count does not change the count of {these} (h·d_k = d_model: the heads "
                     "split projections of a fixed width).")
    if follows:
        names = join_names([b.name for b in follows])
        lines.append(f"The head count changes the count of {names} (h·d_k differs from d_model: the projection widths "
                     "follow the head count; see MHA001).")
    if unknown:
        lines.append(f"Unknown for {join_names(unknown)}: the head layout was not identified.")
    return lines


def what_if_rows(report: Report, heads: Sequence[int]) -> list[tuple[str, str, int, str, str]]:
    """(blocks, heads now, N, count with h·d_k fixed, count with d_k fixed) for each --heads N;
    numbered blocks with the same numbers (layers 0–11) share one row."""
    rows: list[tuple[str, str, int, str, str]] = []
    for n in heads:
        seen: dict[tuple[str, str, str], list[str]] = {}
        for b in report.blocks:
            w = next((x for x in b.what_if if x.num_heads == n), None)
            if b.num_heads == n:
                same = (group(b.params.total), group(b.params.total))
                key = (heads_label(b), *same)
            elif w is None:
                key = (heads_label(b), UNKNOWN, UNKNOWN)
            else:
                width = UNKNOWN if w.total_width_fixed is None else group(w.total_width_fixed)
                key = (heads_label(b), width, group(w.head_dim_fixed))
            seen.setdefault(key, []).append(b.name)
        for key, names in seen.items():
            label = join_names(names)
            # One row for numbered siblings (layers.{0–11}.attn); names that share no pattern get a row each.
            labels = [label] if len(names) == 1 or "{" in label else names
            rows.extend((name, key[0], n, key[1], key[2]) for name in labels)
    return rows


def what_if_notes(report: Report, heads: Sequence[int]) -> list[str]:
    """The K/V heads the what-if assumes for grouped-query blocks, one line per head layout
    (every layer of a Llama shares one), empty when no block groups its K/V heads."""
    by_layout: dict[tuple[int | None, int | None], list[str]] = {}
    for b in report.blocks:
        if (b.num_heads, b.num_kv_heads) in by_layout:
            continue
        notes = [note for n in heads if (note := kv_heads_note(b, n)) is not None]
        if notes:
            by_layout[b.num_heads, b.num_kv_heads] = notes
    if not by_layout:
        return []
    return [f"K/V heads assumed ({KV_RULE}): " + "; ".join(n for notes in by_layout.values() for n in notes) + "."]


def gate_line(result: GateResult) -> str:
    return f"{'passed' if result.passed else 'FAILED'}: {result.message}"


def ignored_line(ignored: Sequence[tuple[str, int]]) -> str:
    """'3 flags hidden by --ignore: MHA001 ×2, MHA003 ×1'."""
    n = sum(c for _, c in ignored)
    codes = ", ".join(f"{code} ×{c}" for code, c in ignored)
    return f"{n} flag{'s' if n != 1 else ''} hidden by --ignore: {codes}"


def verify_label(v: BlockVerification) -> str:
    """'confirmed (8 heads)', 'contradicted (saw 4 heads, static 8)', 'not checkable (why)', ..."""
    heads = f"{v.observed_heads} heads"
    if v.observed_kv_heads is not None and v.observed_kv_heads != v.observed_heads:
        heads += f", {v.observed_kv_heads} kv"
    if v.status == VerifyStatus.CONFIRMED:
        return f"confirmed ({heads})"
    if v.status == VerifyStatus.CONTRADICTED:
        return f"contradicted ({v.disagreement or heads})"
    if v.status == VerifyStatus.OBSERVED:
        return f"observed at run time: {heads}"
    return f"not checkable ({v.reason or 'no reason given'})"


# The one-row-per-model overview of a many-model run (terminal, markdown).
MODEL_COLUMNS = ("Model", "Format", "Params", "Attention", "Share (%)", "Blocks", "Heads", "KV/token", "Flags")


def model_names(reports: Sequence[Report]) -> list[str]:
    """The models' paths without the folder they all share ('sample_models/')."""
    paths = [r.model.path for r in reports]
    prefix = common_prefix(paths)
    return [p[len(prefix):] or p for p in paths]


def kv_cell(report: Report) -> str:
    """The KV cache per token in a cell: bytes, 'none' (an encoder), '?' (unknown), '-' (not sized)."""
    kv = report.model.kv_cache
    if kv is None:
        return "-"
    if kv.bytes_per_token is not None:
        return format_bytes(kv.bytes_per_token)
    return "none" if kv.status is CacheStatus.NONE else UNKNOWN


def model_cells(report: Report, name: str) -> tuple[str, ...]:
    """One model's overview row, in MODEL_COLUMNS order: totals, blocks, the head counts it has
    (each once), KV cache per token, the flag codes raised (each once,
    with how many times: 'MHA005×80')."""
    m = report.model
    heads = ", ".join(dict.fromkeys(heads_label(b) for b in report.blocks)) or "-"
    counts = Counter(f.code for f in report.flags)  # each code with how many times it was raised
    codes = ", ".join(f"{c}×{n}" if n > 1 else c for c, n in sorted(counts.items())) or "-"
    return (name, format_label(m.format), group(m.total_params), group(m.attention_params),
            percent(m.attention_params, m.total_params), str(len(report.blocks)), heads, kv_cell(report), codes)
