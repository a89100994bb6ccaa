"""The meaning of an argument across conventions (``compare``): which names carry the model width,
the head count, a per-head or a total width, and the reads every convention's comparison shares."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from mhainspect.conventions.common import ArgValue

# role -> argument names (across conventions) that carry it
ROLES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "width": ("embed_dim", "hidden_size", "d_model", "query_dim", "InputSize"),
        "heads": ("num_heads", "NumHeads", "num_attention_heads"),
        "head_dim": ("key_dim", "d_kv", "head_dim"),
        "qk_total": ("NumKeyChannels", "NumQueryChannels"),
        "v_head_dim": ("value_dim",),
        "v_total": ("NumValueChannels",),
        "kv_heads": ("num_key_value_heads",),
        "key_input": ("kdim", "key_input_dim"),
        "value_input": ("vdim", "value_input_dim"),
        "output": ("OutputSize", "output_shape"),
        "bias": ("bias", "use_bias", "attention_bias"),
        "add_bias_kv": ("add_bias_kv",),
        "relative_bias": ("has_relative_attention_bias",),
        "buckets": ("relative_attention_num_buckets",),
    }
)


ROLE_WORDS: Mapping[str, str] = MappingProxyType(
    {
        "width": "the model width",
        "heads": "the head count",
        "head_dim": "the per-head query/key width",
        "qk_total": "the total query/key width",
        "v_head_dim": "the per-head value width",
        "v_total": "the total value width",
        "kv_heads": "the key/value head count",
        "key_input": "the key input width",
        "value_input": "the value input width",
        "output": "the output width",
        "bias": "the bias switch",
        "add_bias_kv": "add_bias_kv",
        "relative_bias": "has_relative_attention_bias",
        "buckets": "relative_attention_num_buckets",
    }
)


BOOL_ROLES = frozenset({"bias", "add_bias_kv", "relative_bias"})


def role_int(values: Mapping[str, ArgValue], role: str) -> int | None:
    value = values.get(role)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def per_head(values: Mapping[str, ArgValue], per_role: str, total_role: str, h: int) -> int | None | str:
    """Per-head width from a per-head or a total argument; a string if it cannot divide."""
    per = role_int(values, per_role)
    total = role_int(values, total_role)
    if per is not None and total is not None and per * h != total:
        return f"{ROLE_WORDS[per_role]} {per} × {h} heads ≠ {ROLE_WORDS[total_role]} {total}"
    if per is not None:
        return per
    if total is not None:
        if total % h:
            return f"{ROLE_WORDS[total_role]} {total} is not divisible by {h} heads"
        return total // h
    return None


Built = tuple[dict[str, ArgValue], list[str]] | str


def self_only(v: Mapping[str, ArgValue], E: int, layer: str) -> str | None:
    for role in ("key_input", "value_input"):
        width = role_int(v, role)
        if width is not None and width != E:
            return f"{layer} reads keys and values at the model width {E}, not {width}"
    O = role_int(v, "output")
    if O is not None and O != E:
        return f"{layer} always outputs the model width {E}; cannot output {O}"
    if v.get("add_bias_kv"):
        return f"{layer} has no add_bias_kv"
    return None
