"""Multi-head latent attention (DeepSeek-V2/V3's MLA) from its widths: one rule for every source.

A latent block's weights, whatever a source calls them (h heads, per-head key = nope + rope):

- Q: ``q_b`` [h·(nope + rope), q_rank] after ``q_a`` [q_rank, d_model] and its norm, or one ``q``
  [h·(nope + rope), d_model];
- K/V: ``kv_a`` [rank + rope, d_model] makes the latent and the rotary key shared by every head;
  after its norm [rank], ``kv_b`` [h·(nope + v), rank] makes each head's non-rotary key (nope rows)
  and value (v rows), or per head ``k_b`` [h, rank, nope] and ``v_b`` [h, v, rank] (GGUF);
- O: ``o`` [d_model, h·v].

The widths alone fix every number: rank is kv_b's input, rope = kv_a's output − rank, and
h · rope = Q's width − kv_b's width + O's input (then nope and v follow); a per-head tensor gives h
directly. A config's or a file's claims (``num_heads``, ``d_k`` = nope + rope, ``d_v``, ``kv_rank``,
``rope_dim``) are compared with what the shapes say, and lose to them (a conflict each); where
the shapes cannot tell (no rotary part), a claim decides.

``assemble_latent`` makes the block for weight-only sources (checkpoints, GGUF); the graph builder
(``mhainspect.matchers.block``) calls ``solve`` with the widths of the projections it traced. Either
way the block is the same: kind self, d_k = nope + rope, K and V the shares of the up-projection,
the down-projections and their norms counted in its total (``params.latent``), and ``latent`` saying what decoding caches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mhainspect.ir.weights import HeadOffers
from mhainspect.matchers.assembly import PRIORITY
from mhainspect.matchers.gate import output_gate
from mhainspect.matchers.grouping import GroupedBlock, LatentParts, RoleWeights, linear_dims, projection
from mhainspect.matchers.indexer import assemble_indexer
from mhainspect.results import (
    AttentionBlock,
    BlockKind,
    Evidence,
    EvidenceSource,
    LatentKV,
    ParamBreakdown,
    Projection,
)


@dataclass(frozen=True)
class LatentShapes:
    """The widths a source shows for one latent block (None: not seen)."""

    q_width: int | None  # Q's up-projection output, h·(nope + rope)
    kv_down: int | None  # the K/V down-projection's output, rank + rope
    kv_rank: int | None  # the latent's width: the up-projection's input (or its norm's width)
    kv_up: int | None = None  # the packed K/V up-projection's output, h·(nope + v)
    o_in: int | None = None  # O's input, h·v
    heads: int | None = None  # heads read off a per-head K/V tensor (GGUF attn_k_b / attn_v_b)
    nope: int | None = None  # the non-rotary key width of a per-head K tensor
    v: int | None = None  # the value width of a per-head V tensor
    q_rank: int | None = None  # Q's latent width (Q's down-projection output)
    where: str = ""  # what the widths were read from, for the evidence


@dataclass(frozen=True)
class LatentSolution:
    num_heads: int | None
    d_k: int | None
    d_v: int | None
    nope: int | None
    kv_rank: int | None
    rope_dim: int | None
    q_rank: int | None
    evidence: tuple[Evidence, ...]
    conflicts: tuple[str, ...]

    @property
    def latent(self) -> LatentKV | None:
        if self.kv_rank is None or self.rope_dim is None:
            return None
        return LatentKV(self.kv_rank, self.rope_dim, self.q_rank)


def _exact(num: int | None, den: int | None) -> int | None:
    if num is None or den is None or den <= 0 or num <= 0 or num % den:
        return None
    return num // den


class _Fields:
    """Values decided one field at a time: the shapes' value wins over a claim (a conflict when
    they differ); without a shape value, the strongest claim."""

    def __init__(self, claims: Sequence[Evidence]) -> None:
        self.claims = claims
        self.evidence: list[Evidence] = []
        self.conflicts: list[str] = []

    def claim(self, field: str) -> Evidence | None:
        offers = [e for e in self.claims if e.field == field and isinstance(e.value, int) and e.value > 0]
        return min(offers, key=lambda e: PRIORITY.get(e.source, 7)) if offers else None

    def decide(self, field: str, shape: int | None, why: str,
               source: EvidenceSource = EvidenceSource.WEIGHT_SHAPE) -> int | None:
        said = self.claim(field)
        if shape is not None and (shape < 0 or (shape == 0 and field != "rope_dim")):
            shape = None  # a zero-width tensor fixes nothing (but a latent without a rotary key is one)
        if shape is None:
            return int(said.value) if said is not None and said.value is not None else None
        self.evidence.append(Evidence(field, shape, source, why))
        if said is not None and said.value != shape:
            self.conflicts.append(f"{field}: {said.source} says {said.value} ({said.detail}) but {why} = {shape}; "
                                  "the weight shapes win")
        return shape


def solve(shapes: LatentShapes, claims: Sequence[Evidence]) -> LatentSolution:
    """Heads, d_k, d_v and the latent widths of a latent block from ``shapes``, with ``claims``
    (configs, file metadata, module attributes) where the shapes do not tell."""
    f = _Fields(claims)
    at = f" ({shapes.where})" if shapes.where else ""
    rank = f.decide("kv_rank", shapes.kv_rank, f"the K/V latent's width{at}")
    rope = f.decide("rope_dim", shapes.kv_down - rank if shapes.kv_down and rank and shapes.kv_down >= rank
                    else None, f"K/V down-projection output {shapes.kv_down} − latent {rank}{at}")
    q_rank = f.decide("q_rank", shapes.q_rank, f"Q's latent width{at}")
    h = _heads(f, shapes, rope, at)
    nope = shapes.nope or _exact(shapes.kv_up - shapes.o_in if shapes.kv_up and shapes.o_in else None, h)
    v_from = shapes.v or _exact(shapes.o_in, h)
    q_head = _exact(shapes.q_width, h)
    d_k = f.decide("d_k", q_head if q_head is not None and (nope is None or rope is None or q_head == nope + rope)
                   else None, f"Q width {shapes.q_width} / heads {h}{at}")
    if d_k is None and nope is not None and rope is not None:
        d_k = nope + rope
    d_v = f.decide("d_v", v_from, f"O input {shapes.o_in} / heads {h}{at}" if shapes.v is None
                   else f"per-head V up-projection [.., {shapes.v}, ..]{at}")
    if nope is None and d_k is not None and rope is not None and d_k > rope:
        nope = d_k - rope
    return LatentSolution(h, d_k, d_v, nope, rank, rope, q_rank, tuple(f.evidence), tuple(f.conflicts))


def _heads(f: _Fields, shapes: LatentShapes, rope: int | None, at: str) -> int | None:
    """The heads: read off a per-head K/V tensor, else h · rope = Q width − K/V up width + O input."""
    if shapes.heads is not None:
        return f.decide("num_heads", shapes.heads, f"per-head K/V up-projection [{shapes.heads}, ...]{at}",
                        EvidenceSource.KERNEL_SHAPE)
    spare = shapes.q_width - shapes.kv_up + shapes.o_in if shapes.q_width and shapes.kv_up and shapes.o_in else None
    return f.decide("num_heads", _exact(spare, rope),
                    f"(Q width {shapes.q_width} − K/V up-projection width {shapes.kv_up} + O input {shapes.o_in}) "
                    f"/ rope {rope}{at}")


def kv_up_split(total_rows: int, heads: int | None, nope: int | None, d_v: int | None) -> tuple[int, int] | None:
    """(K rows, V rows) of a packed K/V up-projection: per head nope rows of K, then d_v of V."""
    if heads is None or nope is None or d_v is None or heads * (nope + d_v) != total_rows:
        return None
    return heads * nope, heads * d_v


# ----------------------------------------------------------------------------- weight-only sources


def _dims(rw: RoleWeights) -> tuple[int | None, int | None]:
    dims = linear_dims(rw.weight, rw.module)
    return dims if dims is not None else (None, None)


def _claims(offers: Iterable[HeadOffers]) -> list[Evidence]:
    out: list[Evidence] = []
    for o in offers:
        out.extend(o.evidence())
    return out


def _per_head(rw: RoleWeights | None) -> tuple[int, ...] | None:
    """The shape of a per-head K or V up-projection (GGUF attn_k_b [h, rank, nope], attn_v_b [h, v, rank])."""
    return rw.weight.shape if rw is not None and len(rw.weight.shape) == 3 else None


def _shapes(group: GroupedBlock, parts: LatentParts) -> LatentShapes:
    """The widths of a name-grouped latent block's weights."""
    q, o = group.role("q"), group.role("o")
    kv_up_in, kv_up = _dims(parts.kv_up) if parts.kv_up is not None else (None, None)
    k_b, v_b = _per_head(parts.k_up), _per_head(parts.v_up)
    rank = kv_up_in or (k_b[1] if k_b else None) or (v_b[2] if v_b else None)
    return LatentShapes(_dims(q)[1] if q is not None else None, _dims(parts.kv_down)[1], rank, kv_up,
                        _dims(o)[0] if o is not None else None, heads=(k_b or v_b or (None,))[0],
                        nope=k_b[2] if k_b else None, v=v_b[1] if v_b else None,
                        q_rank=_dims(parts.q_down)[1] if parts.q_down is not None else None, where=group.name)


def _kv_projections(parts: LatentParts, shapes: LatentShapes, sol: LatentSolution
                    ) -> tuple[list[Projection], str | None]:
    """K and V: the shares of the packed up-projection (per head nope rows of K, then d_v of V), or
    the per-head up-projections; and why the heads are unknown when the packed one cannot be split."""
    out: list[Projection] = []
    if parts.kv_up is not None and shapes.kv_up:
        up_in = shapes.kv_rank
        split = kv_up_split(shapes.kv_up, sol.num_heads, sol.nope, sol.d_v)
        if split is None:  # never an even split: counted whole under K, and the heads stay unknown
            return [projection("k", parts.kv_up, up_in, None)], (
                f"the K/V up-projection {parts.kv_up.weight.name} {list(parts.kv_up.weight.shape)} cannot be split "
                "into K and V with the widths and claims found")
        k_rows, v_rows = split
        out += [projection("k", parts.kv_up, up_in, k_rows, (k_rows, shapes.kv_up)),
                projection("v", parts.kv_up, up_in, v_rows, (v_rows, shapes.kv_up))]
    for role, rw in (("k", parts.k_up), ("v", parts.v_up)):
        shape = _per_head(rw)
        if rw is not None and shape is not None:
            out.append(projection(role, rw, shapes.kv_rank, shape[0] * (shape[2] if role == "k" else shape[1])))
    return out, None


def assemble_latent(group: GroupedBlock, offers: Sequence[HeadOffers], *, matcher: str,
                    no_heads_reason: str = "") -> AttentionBlock:
    """The block of a name-grouped latent-attention module (``group.latent`` set)."""
    parts = group.latent
    assert parts is not None
    claims = _claims(offers)
    shapes = _shapes(group, parts)
    sol = solve(shapes, claims)
    q, o = group.role("q"), group.role("o")
    kv, unknown = _kv_projections(parts, shapes, sol)
    projections = ([projection("q", q, *_dims(q))] if q is not None else []) + kv + \
        ([projection("o", o, *_dims(o))] if o is not None else [])
    extra_tensors = [t for rw in (parts.q_down, parts.kv_down) if rw is not None
                     for t in (rw.weight, rw.bias) if t is not None] + list(parts.norms)
    evidence = list(claims) + list(sol.evidence)
    evidence += [Evidence("latent", t.numel, EvidenceSource.WEIGHT_SHAPE,
                          f"{t.name} {list(t.shape)}: latent attention's down-projection or norm") for t in extra_tensors]
    d_model = _dims(parts.kv_down)[0]
    if d_model is not None:
        evidence.append(Evidence("d_model", d_model, EvidenceSource.WEIGHT_SHAPE,
                                 f"input width of the K/V down-projection {parts.kv_down.module}"))
    h = sol.num_heads if unknown is None else None
    if h is None:
        unknown = unknown or no_heads_reason or ("latent attention: neither the widths (no rotary key) nor a "
                                                 "config give the heads")
    indexer, indexer_params, indexer_evidence = assemble_indexer(group.indexer, d_model)
    evidence.extend(indexer_evidence)
    gate, gate_evidence, gate_module = output_gate(group.gates, d_model, _dims(o)[0] if o is not None else None,
                                                   sol.num_heads)
    evidence.extend(gate_evidence)
    others = [t for t in group.others if t.name.rpartition(".")[0] != gate_module]
    evidence += [Evidence("extra", t.numel, EvidenceSource.WEIGHT_SHAPE,
                          f"{t.name} {list(t.shape)}: held by the attention module, none of its projections "
                          "(outside the total)") for t in others]
    latent = sol.latent
    if latent is not None:
        latent = LatentKV(latent.kv_rank, latent.rope_dim, latent.q_rank, tuple(t.name for t in extra_tensors))
    return AttentionBlock(
        name=group.name, matcher=matcher, kind=BlockKind.SELF, num_heads=h, num_kv_heads=h, d_model=d_model,
        d_k=sol.d_k, d_v=sol.d_v, params=ParamBreakdown.from_projections(
            projections, extra=sum(t.numel for t in group.extras) + sum(t.numel for t in others),
            latent=sum(t.numel for t in extra_tensors), indexer=indexer_params, gate=gate),
        projections=tuple(projections), evidence=tuple(evidence), anchor=group.owner,
        unknown_reason=unknown if h is None else None, conflicts=tuple(dict.fromkeys(sol.conflicts)), latent=latent,
        indexer=indexer,
    )
