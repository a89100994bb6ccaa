"""The one assembler: every field of a block decided from its evidence, for every door.

``decide`` takes what a door found -- the offers for each field (an operator attribute, a reshape,
a kernel shape, a module attribute, a config, file metadata), the projection widths the weights
show, a packed [Q; K; V] width still to split -- and decides heads, K/V heads, d_k, d_v and
d_model, with the evidence it added and the conflicts. The graph builder
(``mhainspect.matchers.block``), the weight-only assembler (``mhainspect.matchers.static``:
modules, checkpoints, GGUF) and the fused matchers' packed split all come here, so a head count
comes out the same whichever door a model comes in by. Pure functions, no state.

The rules, in the order ``decide`` applies them:

- ``pick``: the strongest offer for a field wins (``PRIORITY``); every other offer that disagrees
  becomes a conflict line (scale-derived offers are fallbacks and never conflict: custom scales
  are legal).
- ``split_packed``: a packed [Q; K; V] width split by what the head counts imply; when the
  offered kv heads do not fit the width but another count does, the width wins (a conflict).
  Without head counts only the O projection's input width can fix Q's part (an assumption the
  evidence states); never an even split by default.
- widths: heads = width / head size when it divides. Against observations (graph attributes,
  shapes, reshapes, kernels) such a count is one more offer, ranked like them; against a claim
  (``CLAIMS``: a module attribute, a config, file metadata, an option) the widths overrule it
  where two shapes agree (``_Deciding._heads_from_shapes``, ``_kv_from_shapes``) and otherwise say
  where they disagree (``width_conflicts``): shapes outrank what is said about them.
- kv heads default to the query heads only when no K width is known (a K width says otherwise by
  itself); a K/V head count from a width that does not divide the query heads is not taken.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mhainspect.results import Evidence, EvidenceSource

# Stronger sources first. Operator attributes and shapes read in a graph are observed; module
# attributes and configs are claims about the code; widths divided by another number inherit
# that number's doubt; a scale is a fallback only (a custom scale is legitimate, MHA003).
PRIORITY: dict[str, int] = {  # keyed by EvidenceSource members (str): looked up per offer
    EvidenceSource.ATTRIBUTE: 0,
    EvidenceSource.KERNEL_SHAPE: 1,
    EvidenceSource.HEAD_SHAPE: 1,  # a tensor one head wide: observed like a per-head kernel
    EvidenceSource.SHAPE: 2,
    EvidenceSource.SCORE_SHAPE: 3,
    EvidenceSource.MODULE: 4,
    EvidenceSource.CONFIG: 5,
    EvidenceSource.GGUF: 5,  # file metadata: a claim, like a config
    EvidenceSource.OPTION: 5,  # --num-heads: the caller's claim, offered before a config's (it wins a tie)
    EvidenceSource.WEIGHT_SHAPE: 6,
    EvidenceSource.RESHAPE: 6,
    EvidenceSource.REPEAT: 7,
    EvidenceSource.MISSING: 7,
    EvidenceSource.SCALE: 9,
}
_NEVER_CONFLICTS = frozenset({EvidenceSource.SCALE})
# What is said about the code or the file rather than observed in it: the widths check these.
CLAIMS = frozenset({EvidenceSource.MODULE, EvidenceSource.CONFIG, EvidenceSource.GGUF, EvidenceSource.OPTION})


def conflict_text(field: str, best: Evidence, other: Evidence) -> str:
    return f"{field}: {best.source} says {best.value} ({best.detail}) but {other.source} says {other.value} " \
           f"({other.detail})"


def pick(evidence: Iterable[Evidence], field: str) -> tuple[int | None, tuple[str, ...]]:
    """The value of ``field`` from its strongest offer (ties: the first offered), and the conflicts."""
    offers = [e for e in evidence if e.field == field and isinstance(e.value, int)]
    if not offers:
        return None, ()
    if len(offers) > 1:
        offers.sort(key=lambda e: PRIORITY.get(e.source, 7))  # stable: ties keep the order
    best = offers[0]
    conflicts = tuple(conflict_text(field, best, e) for e in offers[1:]
                      if e.value != best.value and e.source not in _NEVER_CONFLICTS)
    return int(best.value) if best.value is not None else None, conflicts


def per_head(width: int | None, count: int | None) -> int | None:
    """width / count when both are known and it divides (heads from a width, or a head size)."""
    if width and count and width % count == 0:
        return width // count
    return None


def default_kv_heads(num_heads: int | None, k_width: int | None) -> int | None:
    """Without any K/V head evidence: as many as query heads, but only when no K width is known
    (a known K width with a known head size has offered its own count already)."""
    return num_heads if num_heads is not None and k_width is None else None


def width_conflicts(h: int | None, g: int | None, d_k: int | None, wq: int | None, wk: int | None
                    ) -> list[str]:
    out: list[str] = []
    if h is not None and d_k is not None and wq is not None and h * d_k != wq:
        out.append(f"num_heads {h} × d_k {d_k} = {h * d_k} but the Q projection is {wq} wide")
    if g is not None and d_k is not None and wk is not None and g * d_k != wk:
        out.append(f"num_kv_heads {g} × d_k {d_k} = {g * d_k} but the K projection is {wk} wide")
    # A count that does not divide the width gives no whole head size: the claim cannot be the layout.
    if h is not None and d_k is None and wq and wq % h:
        out.append(f"num_heads {h} does not divide the Q projection's width {wq}: no whole head size")
    if g is not None and d_k is None and wk and wk % g:
        out.append(f"num_kv_heads {g} does not divide the K projection's width {wk}: no whole head size")
    return out


@dataclass(frozen=True)
class PackedSplit:
    q: int
    k: int
    v: int
    kv_heads: int | None  # the kv heads the split used (None: not implied by the split)
    conflict: str | None = None  # the offered kv heads did not fit the width; the width won
    assumption: str | None = None  # what the split takes for granted (evidence text), when anything

    @property
    def parts(self) -> tuple[int, int, int]:
        return self.q, self.k, self.v


def split_packed(total: int | None, h: int | None, g: int | None, d_k: int | None, d_v: int | None,
                 o_in: int | None = None) -> PackedSplit | None:
    """Q, K and V widths of a packed [(h·d_k) + (g·d_k) + (g·d_v)] projection of ``total`` rows.

    ``o_in``: the O projection's input width (h·d_v). Without head sizes, equal thirds only when
    the heads are known and K/V heads equal them (and O agrees); else, taking d_v = d_k, Q is as
    wide as O's input and K, V share the rest equally (g·d_k = g·d_v), used only when Q's width is a
    whole multiple of K's (h = n·g). None: nothing splits it (never an even split by default)."""
    if not total:
        return None
    return (_split_by_head_size(total, h, g, d_k, d_v) or _split_by_heads(total, h, g, o_in)
            or _split_by_o(total, h, o_in) or _split_gated(total, h, g, d_k, d_v, o_in))


def _split_gated(total: int, h: int | None, g: int | None, d_k: int | None, d_v: int | None,
                 o_in: int | None) -> PackedSplit | None:
    """A packed weight one Q width wider than Q, K and V at the heads and head sizes offered, where
    no other reading fits: a gate as wide as Q packed beside them (gated attention, HRM's
    ``gqkv_proj``), counted with Q as a gate packed into ``q_proj`` is (Qwen3-Next). The order of
    the parts does not change a width, so none is assumed."""
    if not (h and d_k):
        return None
    g2, dv = g or h, d_v or d_k
    if 2 * h * d_k + g2 * (d_k + dv) != total or (o_in is not None and o_in != h * dv):
        return None
    return PackedSplit(2 * h * d_k, g2 * d_k, g2 * dv, g2, assumption=(
        f"{total} = {h}·{d_k} + {g2}·({d_k} + {dv}) + a gate as wide as Q ({h}·{d_k}), counted with Q"))


def _split_by_head_size(total: int, h: int | None, g: int | None, d_k: int | None, d_v: int | None
                        ) -> PackedSplit | None:
    """The split the heads and head sizes give; when the offered kv heads do not fit, the count
    the width solves for (the width is what runs)."""
    if not (h and d_k):
        return None
    g2, dv = g or h, d_v or d_k
    if h * d_k + g2 * (d_k + dv) == total:
        return PackedSplit(h * d_k, g2 * d_k, g2 * dv, g2)
    rest = total - h * d_k
    if rest <= 0 or rest % (d_k + dv):
        return None
    solved = rest // (d_k + dv)
    if h % solved:
        return None
    why = None if g is None else (f"num_kv_heads: the packed width {total} = {h}·{d_k} + {solved}·"
                                  f"({d_k} + {dv}) gives {solved}, not the {g} offered")
    return PackedSplit(h * d_k, solved * d_k, solved * dv, solved, why)


def _split_by_heads(total: int, h: int | None, g: int | None, o_in: int | None) -> PackedSplit | None:
    """Without head sizes: h + 2g equal head sizes (g ≠ h), or thirds (g = h or unknown), where O's
    input width does not contradict them; else with g = h offered, V as wide as O's input and Q, K
    the rest in halves (d_k ≠ d_v)."""
    if not h:
        return None
    if g and h != g and total % (h + 2 * g) == 0 and (o_in is None or o_in == h * (total // (h + 2 * g))):
        d = total // (h + 2 * g)
        return PackedSplit(h * d, g * d, g * d, g)
    if total % 3 == 0 and (g is None or g == h) and (o_in is None or o_in == total // 3):
        return PackedSplit(total // 3, total // 3, total // 3, h)
    if g == h and o_in and o_in < total and o_in % h == 0 and (total - o_in) % (2 * h) == 0:
        # As many K/V heads as query heads: Q and K are equally wide (h·d_k each) and V is O's input
        # (h·d_v), so d_k ≠ d_v splits exactly (LeViT's qkv: per head d_k + d_k + attn_ratio·d_k).
        qk = (total - o_in) // 2
        return PackedSplit(qk, qk, o_in, h)
    return None


def _split_by_o(total: int, h: int | None, o_in: int | None) -> PackedSplit | None:
    """Without head counts: Q as wide as O's input, K and V the rest in equal parts (stated)."""
    if not (o_in and 0 < o_in < total and (total - o_in) % 2 == 0):
        return None
    kv = (total - o_in) // 2
    if not kv or o_in % kv or (h is not None and o_in % h):
        return None
    return PackedSplit(o_in, kv, kv, None, assumption=(
        f"Q width {o_in} = the O projection's input width (h·d_v, taken as h·d_k: d_v = d_k); K and V "
        f"share the other {total - o_in} equally (g·d_k = g·d_v)"))


# ----------------------------------------------------------------------------- the one decision


@dataclass(frozen=True)
class Widths:
    """What a block's weights show (None: not seen). ``q``, ``k``, ``v``: the output widths of the
    Q, K and V projections (a role's share of a packed product the graph splits); ``packed``: the
    output width of a packed [Q; K; V] weight whose split is still to be found (``packed_label``
    names it in the texts); ``o_in``: the O projection's input width (h·d_v)."""

    q: int | None = None
    k: int | None = None
    v: int | None = None
    o_in: int | None = None
    packed: int | None = None
    packed_label: str = ""


def offer_misfit(widths: tuple[int, ...], heads: int | None, head_dim: int | None, d_model: int | None,
                 attention_width: int | None) -> str | None:
    """Why head counts offered by what describes a model of ``widths`` (a config's hidden size) are
    not the block's, whose input is ``d_model`` wide and whose attention ``attention_width`` (Q's
    output, else O's input); None when they may be: no width to compare, the block's d_model or
    attention width is one of them, or the offered heads × head size are its attention width. A
    config read for a block it does not describe (another stage, tower or sub-module of other
    widths) would otherwise give a confident wrong count."""
    if not widths or d_model is None or (heads is None and head_dim is None):
        return None
    if d_model in widths or attention_width in widths:
        return None
    if heads and head_dim and attention_width is not None and heads * head_dim == attention_width:
        return None
    said = "/".join(str(w) for w in widths)
    attention = f" nor its attention width {attention_width}" if attention_width is not None else ""
    return (f"the config's width {said} is neither this block's d_model {d_model}{attention}: it describes "
            "another block, so its head counts are not taken for this one")


def offer_fit(widths: tuple[int, ...], heads: int | None, kv_heads: int | None, head_dim: int | None,
              d_model: int | None, attention_width: int | None, k_width: int | None) -> int | None:
    """How well an offer describes a block (``offer_misfit``'s widths, and its own numbers against the
    block's widths): None when it does not (another width; heads × head size not Q's width, K/V heads ×
    head size not K's, heads that do not divide Q's width); 2 when the
    block's attention width is one of its widths or its heads × head size; else 1 (its width is the
    block's d_model, or there is nothing to compare). The rank chooses among a config's alternatives."""
    if heads and head_dim and attention_width and heads * head_dim != attention_width:
        return None
    if kv_heads and head_dim and k_width and kv_heads * head_dim != k_width:
        return None
    if heads and not head_dim and attention_width and attention_width % heads:
        return None
    if offer_misfit(widths, heads, head_dim, d_model, attention_width) is not None:
        return None
    if attention_width is not None and (attention_width in widths or (heads and head_dim and
                                                                      heads * head_dim == attention_width)):
        return 2
    return 1


@dataclass(frozen=True)
class Decision:
    """Every field of a block as decided, the evidence with what the decision added (in order),
    the conflicts, and for a packed weight its split (None: nothing splits it; ``unsplit`` says so)."""

    num_heads: int | None
    num_kv_heads: int | None
    d_k: int | None
    d_v: int | None
    d_model: int | None
    q_width: int | None
    k_width: int | None
    v_width: int | None
    evidence: tuple[Evidence, ...]
    conflicts: tuple[str, ...]
    split: PackedSplit | None = None
    unsplit: str | None = None


def decide(evidence: Iterable[Evidence], widths: Widths, *, d_model: tuple[int | None, str] | None = None,
           unsplit: str | None = None) -> Decision:
    """Heads, K/V heads, d_k, d_v and d_model of one block from ``evidence`` (what the door offers,
    in the order offered) and ``widths``. ``d_model``: the door's width for it (the input of Q,
    else the output of O) and where that was read; ``unsplit``: why the door cannot give Q's width
    (a packed projection whose split the graph does not show): the heads are then unknown."""
    d = _Deciding(list(evidence), widths)
    d.head_sizes()
    d.packed()
    d.heads()
    d.kv_heads()
    d.value_size()
    d.width_disagreements()
    if d_model is not None and d_model[0] is not None and d_model[0] > 0:
        d.evidence.append(Evidence("d_model", int(d_model[0]), EvidenceSource.WEIGHT_SHAPE, d_model[1]))
    model_width = d.pick("d_model")
    unsplit = unsplit or d.unsplit
    h = None if unsplit is not None else d.h
    return Decision(h, d.g if h is not None else None, d.d_k, d.d_v, model_width, d.wq, d.wk, d.wv,
                    tuple(d.evidence), tuple(dict.fromkeys(d.conflicts)), d.split, unsplit)


@dataclass
class _Deciding:
    """The state of one ``decide``: the evidence so far and the values decided so far."""

    evidence: list[Evidence]
    widths: Widths
    conflicts: list[str] = field(default_factory=list)
    h: int | None = None
    g: int | None = None
    d_k: int | None = None
    d_v: int | None = None
    wq: int | None = None
    wk: int | None = None
    wv: int | None = None
    forced_g: int | None = None  # the kv heads a packed width solved for, over any claim
    solved: Evidence | None = None  # its evidence
    split: PackedSplit | None = None
    unsplit: str | None = None

    def __post_init__(self) -> None:
        self.wq, self.wk, self.wv = self.widths.q, self.widths.k, self.widths.v

    def pick(self, name: str) -> int | None:
        value, conflicts = pick(self.evidence, name)
        self.conflicts.extend(conflicts)
        return value

    def claimed(self, name: str) -> bool:
        return any(e.field == name and e.source in CLAIMS and isinstance(e.value, int) for e in self.evidence)

    def checks(self, name: str) -> bool:
        """Whether a count derived from the widths is offered for ``name``: beside observations
        (or nothing), where it ranks like them; never beside a claim, which the widths check and
        overrule instead (``_heads_from_shapes``, ``_kv_from_shapes``, ``width_disagreements``)."""
        return not self.claimed(name)

    def offer(self, name: str, value: int | None, detail: str) -> None:
        if value is not None and value > 0:
            self.evidence.append(Evidence(name, value, EvidenceSource.WEIGHT_SHAPE, detail))

    def head_sizes(self) -> None:
        self.d_k = self.pick("d_k")
        self.d_v = self.pick("d_v")

    def packed(self) -> None:
        """A packed weight's Q, K and V widths from the head counts offered so far."""
        w = self.widths
        if not w.packed:
            return
        h, g = pick(self.evidence, "num_heads")[0], pick(self.evidence, "num_kv_heads")[0]
        split = split_packed(w.packed, h, g, self.d_k, self.d_v, w.o_in)
        if split is None:
            self.unsplit = (f"packed {w.packed_label}: nothing gives its Q/K/V split (no head counts, no O "
                            "projection width that fits), so it is counted whole under Q")
            self.evidence.append(Evidence("qkv_split", None, EvidenceSource.WEIGHT_SHAPE, self.unsplit))
            if h is not None:
                self.conflicts.append(f"cannot split packed {w.packed_label} into Q/K/V with the head counts offered")
            return
        self.split = split
        self.wq, self.wk, self.wv = split.parts
        self.evidence.append(Evidence("qkv_split", None, EvidenceSource.WEIGHT_SHAPE,
                                      f"packed {w.packed_label} split " + " + ".join(str(p) for p in split.parts)
                                      + (f" ({split.assumption})" if split.assumption else "")))
        if split.conflict is not None and split.kv_heads is not None:
            self.forced_g = split.kv_heads  # the width is what the block computes with: it wins over a claim
            self.solved = Evidence("num_kv_heads", split.kv_heads, EvidenceSource.WEIGHT_SHAPE, split.conflict)
            self.evidence.append(self.solved)
            self.conflicts.append(split.conflict)

    def heads(self) -> None:
        """Heads: Q's width over the head size is an offer beside observations; a claim the widths
        overrule where O's input width agrees. Then d_k from Q's width, when nothing gave it."""
        if self.checks("num_heads"):
            self.offer("num_heads", per_head(self.wq, self.d_k), f"Q width {self.wq} / d_k {self.d_k}")
        self.h = self.pick("num_heads")
        if self.d_k is None and (n := per_head(self.wq, self.h)) is not None:
            self.d_k = n
            self.evidence.append(Evidence("d_k", n, EvidenceSource.WEIGHT_SHAPE, f"Q width {self.wq} / heads {self.h}"))
        if self.claimed("num_heads"):
            self._heads_from_shapes()

    def _heads_from_shapes(self) -> None:
        """With d_k fixed by a shape, Q's width gives the heads when O's input width agrees (a Q that
        also carries a gate, as in gated attention, does not)."""
        h, d_k, wq, wo_in = self.h, self.d_k, self.wq, self.widths.o_in
        observed = (EvidenceSource.HEAD_SHAPE, EvidenceSource.KERNEL_SHAPE)
        if not (h and d_k and wq and h * d_k != wq and wq % d_k == 0):
            return
        if not any(e.field == "d_k" and e.value == d_k and e.source in observed for e in self.evidence):
            return
        h2 = wq // d_k
        if wo_in is None or wo_in == h2 * (self.d_v or d_k):
            self._overrule("num_heads", h, h2, f"Q width {wq} / d_k {d_k} = {h2}")
            self.h = h2

    def kv_heads(self) -> None:
        """K/V heads: K's width over d_k (and V's over d_v) are offers beside observations; a claim
        the widths overrule where V's width agrees; the query heads when no K width is known."""
        claimed = self.claimed("num_kv_heads")
        if self.checks("num_kv_heads") and self.forced_g is None:
            for role, width, size in (("K", self.wk, self.d_k), ("V", self.wv, self.d_v)):
                self._offer_kv(role, width, size)
        if self.forced_g is None:
            self.g = self.pick("num_kv_heads")
        else:  # the claims still meet each other; the count the width solved for has its own conflict
            self.conflicts.extend(pick([e for e in self.evidence if e is not self.solved], "num_kv_heads")[1])
            self.g = self.forced_g
        if claimed or self.forced_g is not None:
            self._kv_from_shapes()
        if self.g is None and self.d_k:  # with no head size known, K's heads would be a guess
            self.g = default_kv_heads(self.h, self.wk)

    def _offer_kv(self, role: str, width: int | None, size: int | None) -> None:
        """K's (or V's) width over the head size, offered as the K/V heads when it divides the query
        heads (each K/V head serves h / g query heads); a count that does not is no layout: the
        head size or the head count is not what the block computes with, and that is said."""
        g = per_head(width, size)
        if g is not None and self.h and self.h % g:
            self.conflicts.append(f"num_kv_heads: {role} width {width} / d_k {size} = {g} K/V heads, which do not "
                                  f"divide the {self.h} query heads: the head size or the head count is not the "
                                  "layout")
            return
        self.offer("num_kv_heads", g, f"{role} width {width} / d_{'k' if role == 'K' else 'v'} {size}")

    def _kv_from_shapes(self) -> None:
        """With Q agreeing (h·d_k = Q width), K's width gives the KV heads when V's agrees (or V's
        head size is not known yet), and V's width the value head size when O's agrees."""
        h, g, d_k, d_v = self.h, self.g, self.d_k, self.d_v
        wk, wv, wo_in = self.wk, self.wv, self.widths.o_in
        if not (h and d_k and self.wq == h * d_k):
            return
        if g is not None and wk and g * d_k != wk and wk % d_k == 0 and (wv is None or d_v is None
                                                                         or wv == (wk // d_k) * d_v):
            self._overrule("num_kv_heads", g, wk // d_k, f"K width {wk} / d_k {d_k} = {wk // d_k}")
            self.g = g = wk // d_k
        if g and d_v is not None and wv and g * d_v != wv and wv % g == 0 and (wo_in is None
                                                                              or wo_in == h * (wv // g)):
            self._overrule("d_v", d_v, wv // g, f"V width {wv} / kv heads {g} = {wv // g}")
            self.d_v = wv // g

    def _overrule(self, name: str, claimed: int, value: int, why: str) -> None:
        """The weight shapes win over ``claimed``: a conflict naming the claim, the shape as evidence."""
        claim = next((e for e in self.evidence if e.field == name and e.value == claimed), None)
        said = f"{claim.source} says {claimed} ({claim.detail})" if claim is not None else f"{claimed} was assumed"
        self.conflicts.append(f"{name}: {said} but {why}; the weight shapes win")
        self.evidence.append(Evidence(name, value, EvidenceSource.WEIGHT_SHAPE, why))

    def value_size(self) -> None:
        if self.d_v is None and (n := per_head(self.wv, self.g)) is not None:
            self.d_v = n
            self.evidence.append(Evidence("d_v", n, EvidenceSource.WEIGHT_SHAPE, f"V width {self.wv} / kv heads {self.g}"))

    def width_disagreements(self) -> None:
        """Where a claimed count and the widths disagree and no shape settled it (an observed count
        that disagrees has met the width's own offer in ``pick`` already)."""
        h = self.h if self.claimed("num_heads") else None
        g = self.g if self.claimed("num_kv_heads") or self.forced_g is not None else None
        self.conflicts.extend(width_conflicts(h, g, self.d_k, self.wq, self.wk))


def norm_shared(shape: tuple[int, ...], d_k: int | None, width: int | None, heads: int | None) -> bool | None:
    """How a norm of Q or K with a weight of ``shape`` fits its side (``width`` = heads · d_k): True
    for one vector d_k wide that every head shares (Qwen3, Gemma 3), False for one as wide as the
    projection (OLMo 2) or one per head ([heads, d_k]: Cohere); None when it fits neither (no norm of
    that side). Axes of size 1 are views (an exporter's [1, 1, 1, d_k])."""
    dims = tuple(d for d in shape if d != 1)
    if len(dims) == 1 and dims[0] == width:
        return False
    if len(dims) == 1 and dims[0] == d_k:
        return True
    if len(dims) == 2 and dims == (heads, d_k):
        return False
    return None
