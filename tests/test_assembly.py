"""The one assembler (matchers.assembly.decide): every field of a block from its evidence, whatever
door the evidence came in by (a graph's matchers, a module, a checkpoint and its config, GGUF).

The rules are the ones docs/architecture.md lists: observations compete with the width-derived
counts by priority; a claim (module, config, file metadata, option) is overruled by the widths
where two shapes agree; a packed [Q; K; V] width is split by what the head counts imply, never
evenly by default."""

from __future__ import annotations

from mhainspect.matchers.assembly import Widths, decide
from mhainspect.results import Evidence, EvidenceSource

RESHAPE, CONFIG, KERNEL = EvidenceSource.RESHAPE, EvidenceSource.CONFIG, EvidenceSource.KERNEL_SHAPE


def _fields(d: object) -> tuple[object, ...]:
    return tuple(getattr(d, f) for f in ("num_heads", "num_kv_heads", "d_k", "d_v", "d_model"))


def test_observed_counts_meet_the_widths_as_offers() -> None:
    """A graph's reshape says 8 heads of 64: Q 512 wide agrees, K and V 128 wide give 2 K/V heads."""
    offers = [Evidence("num_heads", 8, RESHAPE, "reshape of Q"), Evidence("d_k", 64, RESHAPE, "reshape of Q")]
    d = decide(offers, Widths(512, 128, 128, o_in=512), d_model=(512, "input width of Q"))
    assert _fields(d) == (8, 2, 64, 64, 512)
    assert d.conflicts == ()
    said = {(e.field, e.value, e.detail) for e in d.evidence if e.source is EvidenceSource.WEIGHT_SHAPE}
    assert ("num_heads", 8, "Q width 512 / d_k 64") in said
    assert ("num_kv_heads", 2, "K width 128 / d_k 64") in said
    assert ("d_v", 64, "V width 128 / kv heads 2") in said


def test_an_observation_the_widths_contradict_keeps_its_rank_and_the_conflict_is_listed() -> None:
    offers = [Evidence("num_heads", 8, EvidenceSource.ATTRIBUTE, "op.num_heads"),
              Evidence("d_k", 32, EvidenceSource.SHAPE, "last axis of Q")]
    d = decide(offers, Widths(512, 512, 512))
    assert d.num_heads == 8  # the operator's attribute is what runs
    # K's width over d_k (16) does not divide the 8 heads: no K/V head count is taken from it.
    assert d.num_kv_heads is None
    assert d.conflicts == ("num_heads: attribute says 8 (op.num_heads) but weight_shape says 16 (Q width 512 / d_k 32)",
                           "num_kv_heads: K width 512 / d_k 32 = 16 K/V heads, which do not divide the 8 query heads: "
                           "the head size or the head count is not the layout")


def test_a_config_the_widths_contradict_loses_to_them() -> None:
    """config.json says 8 K/V heads; K and V are 128 wide at d_k 64: 2 heads, the claim overruled."""
    offers = [Evidence("num_heads", 8, CONFIG, "config.json"), Evidence("num_kv_heads", 8, CONFIG, "config.json"),
              Evidence("d_k", 64, CONFIG, "config.json head_dim")]
    d = decide(offers, Widths(512, 128, 128, o_in=512))
    assert _fields(d)[:4] == (8, 2, 64, 64)
    assert d.conflicts == ("num_kv_heads: config says 8 (config.json) but K width 128 / d_k 64 = 2; "
                           "the weight shapes win",)


def test_a_claim_with_no_head_size_is_checked_by_the_widths() -> None:
    """Only the heads are said (GPT-2's n_head): d_k from Q's width, K/V heads and d_v from theirs."""
    d = decide([Evidence("num_heads", 12, CONFIG, "n_head")], Widths(768, 768, 768, o_in=768))
    assert _fields(d)[:4] == (12, 12, 64, 64)
    assert d.conflicts == ()


def test_heads_from_a_kernel_overrule_a_config_where_o_agrees() -> None:
    offers = [Evidence("num_heads", 4, CONFIG, "config.json"), Evidence("d_k", 64, KERNEL, "Q kernel [512, 8, 64]")]
    d = decide(offers, Widths(512, 512, 512, o_in=512))
    assert d.num_heads == 8
    assert d.conflicts[0] == "num_heads: config says 4 (config.json) but Q width 512 / d_k 64 = 8; the weight shapes win"


def test_a_packed_width_is_split_by_the_head_counts_and_solves_the_kv_heads() -> None:
    """[Q; K; V] 768 rows, 8 heads of 64: Q 512, and 256 for K and V is 2 K/V heads, not the 8 offered."""
    offers = [Evidence("num_heads", 8, CONFIG, "config"), Evidence("num_kv_heads", 8, CONFIG, "config"),
              Evidence("d_k", 64, CONFIG, "config")]
    d = decide(offers, Widths(o_in=512, packed=768, packed_label="qkv [768, 512]"))
    assert d.split is not None and d.split.parts == (512, 128, 128)
    assert _fields(d)[:4] == (8, 2, 64, 64)
    assert d.conflicts == ("num_kv_heads: the packed width 768 = 8·64 + 2·(64 + 64) gives 2, not the 8 offered",)


def test_a_packed_width_nothing_splits_leaves_the_heads_unknown() -> None:
    d = decide([Evidence("num_heads", 8, CONFIG, "config")], Widths(packed=1000, packed_label="qkv [1000, 64]"))
    assert d.split is None and d.num_heads is None and d.num_kv_heads is None
    assert d.unsplit is not None and "nothing gives its Q/K/V split" in d.unsplit
    assert d.conflicts == ("cannot split packed qkv [1000, 64] into Q/K/V with the head counts offered",)


def test_a_graph_that_does_not_show_a_split_leaves_the_heads_unknown() -> None:
    d = decide([Evidence("num_heads", 8, RESHAPE, "reshape")], Widths(), unsplit="packed projection p: no split shown")
    assert d.num_heads is None and d.num_kv_heads is None and d.unsplit == "packed projection p: no split shown"


def test_one_decision_whichever_door() -> None:
    """The same facts offered as a module's attributes or as a config give the same fields (the
    source only ranks the offers and names them in the evidence)."""
    widths = Widths(1024, 256, 256, o_in=1024)
    as_module = decide([Evidence("num_heads", 16, EvidenceSource.MODULE, "attn.num_heads"),
                        Evidence("num_kv_heads", 4, EvidenceSource.MODULE, "attn.num_key_value_groups")], widths)
    as_config = decide([Evidence("num_heads", 16, CONFIG, "config.json"),
                        Evidence("num_kv_heads", 4, CONFIG, "config.json")], widths)
    as_gguf = decide([Evidence("num_heads", 16, EvidenceSource.GGUF, "head_count"),
                      Evidence("num_kv_heads", 4, EvidenceSource.GGUF, "head_count_kv")], widths)
    assert _fields(as_module) == _fields(as_config) == _fields(as_gguf) == (16, 4, 64, 64, None)


def test_a_per_head_kernel_is_checked_by_the_widths_from_every_door() -> None:
    """Keras-style kernels [in, heads, head size] give the heads; the projection widths over the
    head sizes are offered beside them whether the kernels were read in a graph or in a
    checkpoint's header (before the one assembler, a checkpoint's block did not list them)."""
    q, k, v = "Q kernel query/kernel [32, 4, 16]", "K kernel key/kernel [32, 4, 16]", "V kernel value/kernel [32, 4, 16]"
    offers = [Evidence("num_heads", 4, KERNEL, q), Evidence("d_k", 16, KERNEL, q),
              Evidence("num_kv_heads", 4, KERNEL, k), Evidence("d_v", 16, KERNEL, v)]
    d = decide(offers, Widths(64, 64, 64, o_in=64))
    assert _fields(d)[:4] == (4, 4, 16, 16) and d.conflicts == ()
    derived = [(e.field, e.detail) for e in d.evidence if e.source is EvidenceSource.WEIGHT_SHAPE]
    assert derived == [("num_heads", "Q width 64 / d_k 16"), ("num_kv_heads", "K width 64 / d_k 16"),
                       ("num_kv_heads", "V width 64 / d_v 16")]
