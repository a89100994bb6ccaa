"""Assemble an AttentionBlock from what a matcher found: projections, dims, evidence.

Every number is offered with its source; the builder picks the strongest source, records the
others as evidence, and reports disagreements instead of silently choosing.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from fractions import Fraction

from mhainspect.ir.dataflow import VALUE_PRESERVING_OPS, GraphIndex
from mhainspect.ir.graph import Node, Tensor
from mhainspect.matchers import assembly
from mhainspect.matchers.projection import WHOLE, ProjectionHit, TracedProjection, recognise_projection
from mhainspect.matchers.scopes import block_name
from mhainspect.results import (
    AttentionBlock,
    BlockKind,
    Evidence,
    EvidenceSource,
    ParamBreakdown,
    Projection,
)

# Which offer wins, the conflict text and the defaults are the shared rules of
# mhainspect.matchers.assembly (the same for modules and checkpoints).
_FIELDS = ("num_heads", "num_kv_heads", "d_model", "d_k", "d_v")


@dataclass
class RoleInput:
    """How one of Q, K, V reaches the attention core."""

    role: str
    traced: TracedProjection | None = None
    # Packed weights inside a fused op (com.microsoft Attention): explicit counts.
    fused_weight: str | None = None
    fused_in: int | None = None
    fused_width: int | None = None
    fused_weight_params: int = 0
    fused_bias: str | None = None
    fused_bias_params: int = 0
    fused_node: str = ""
    tensor: str = ""  # the tensor that reaches the attention core (decomposed matchers)
    # This role's part of a packed Q|K|V bias that a fused op adds itself (com.microsoft
    # MultiHeadAttention's bias input: onnxruntime's optimizer moves the projections' bias Adds into it).
    op_bias: str | None = None
    op_bias_params: int = 0


@dataclass
class BlockBuilder:
    index: GraphIndex
    anchor: Node
    matcher: str
    evidence: list[Evidence] = field(default_factory=list)
    roles: dict[str, RoleInput] = field(default_factory=dict)
    output: ProjectionHit | None = None
    scale: float | None = None
    scale_known: bool = False
    notes: list[str] = field(default_factory=list)
    extras: dict[str, int] = field(default_factory=dict)  # score tables (outside the total) by tensor name
    kv_rows: dict[str, int] = field(default_factory=dict)  # learned K/V rows (bias_k/bias_v) by tensor name
    latent_parts: dict[str, int] = field(default_factory=dict)  # a latent block's down-projections and norms
    kind: BlockKind | None = None  # set by a matcher that knows the kind (additive); else read from the sources
    # Stored tensors the block reads that a converter computed, not parameters: a one-element score
    # scale 1/√d_k, a causal or padding mask folded into a 0/1 or additive table.
    constants: set[str] = field(default_factory=set)
    # role -> the projection that made its projection's (narrower) input: latent attention (build()).
    latent: dict[str, ProjectionHit] = field(default_factory=dict)

    def offer(self, name: str, value: int | None, source: str, detail: str) -> None:
        if value is None or value <= 0:
            return
        self.evidence.append(Evidence(name, int(value), source, detail))

    def width(self, role: str, fractions: dict[str, Fraction | None] | None = None) -> int | None:
        """Total projection width of a role (its slice of a packed weight); ``fractions``: what
        _fractions gives, when the caller has it."""
        r = self.roles.get(role)
        if r is None:
            return None
        if r.fused_width is not None:
            return r.fused_width
        if r.traced is None:
            return None
        frac = fractions[role] if fractions is not None else self._fraction(role)
        if frac is None:
            return None
        # out_features · frac when that is a whole number (exact in ints: frac is in lowest terms).
        w = r.traced.hit.out_features * frac.numerator
        return w // frac.denominator if w % frac.denominator == 0 else None

    def _fraction(self, role: str) -> Fraction | None:
        """The share of its projection that a role uses: the whole when no other role reads it,
        else the split the graph shows; None when it shows none (never an equal division)."""
        r = self.roles[role]
        assert r.traced is not None
        node = r.traced.hit.node
        sharing = 0
        for x in self.roles.values():
            if x.traced is not None and x.traced.hit.node is node:
                sharing += 1
        if sharing == 1:
            return WHOLE
        if r.traced.split_fraction is not None and r.traced.split_fraction != 1:
            return r.traced.split_fraction
        return None

    def _fractions(self) -> dict[str, Fraction | None]:
        """_fraction of every traced role (the roles do not change while a block is built)."""
        return {role: self._fraction(role) for role, r in self.roles.items() if r.traced is not None}

    def _unsplit_packed(self, fractions: dict[str, Fraction | None]) -> str | None:
        """Why Q/K/V widths are unknown: a packed projection whose split the graph does not show."""
        for role in ("q", "k", "v"):
            r = self.roles.get(role)
            if r is not None and r.traced is not None and fractions[role] is None:
                hit = r.traced.hit
                users = "/".join(x.role.upper() for x in self.roles.values()
                                 if x.traced is not None and x.traced.hit.node is hit.node)
                return (f"packed projection {hit.node.name} ({hit.out_features} outputs) feeds {users}, but the "
                        "graph does not show how its outputs are split (no constant Split/Slice sizes, no shapes)")
        return None

    def build(self, taken_names: set[str]) -> AttentionBlock:
        if self._latent_kv():
            return self._build_latent(taken_names)
        fractions = self._fractions()
        wq, wk, wv = self.width("q", fractions), self.width("k", fractions), self.width("v", fractions)
        unsplit = self._unsplit_packed(fractions)
        if unsplit is not None:
            self.notes.insert(0, unsplit)  # the K/V head count would be a guess
        decision = assembly.decide(self.evidence, assembly.Widths(
            wq, wk, wv, o_in=self.output.in_features if self.output is not None else None),
            d_model=self._model_width(), unsplit=unsplit)
        self.evidence = list(decision.evidence)
        projections = self._with_norms(self._projections({"q": wq, "k": wk, "v": wv}, fractions), decision)
        name = block_name(self.index, self.anchor, projections, taken_names)
        return AttentionBlock(
            name=name, matcher=self.matcher, kind=self._kind(),
            num_heads=decision.num_heads, num_kv_heads=decision.num_kv_heads, d_model=decision.d_model,
            d_k=decision.d_k, d_v=decision.d_v,
            params=ParamBreakdown.from_projections(projections, extra=sum(self.extras.values()),
                                                   kv_rows=sum(self.kv_rows.values())),
            projections=projections, evidence=decision.evidence, scale=self.scale, scale_known=self.scale_known,
            anchor=self.anchor.name, unknown_reason=None if decision.num_heads is not None else self._unknown_reason(wq),
            conflicts=decision.conflicts,
        )

    def _model_width(self) -> tuple[int | None, str] | None:
        """d_model as the weights show it: the input width of Q's projection (or of the op's packed
        weight), else the output width of O's."""
        q = self.roles.get("q")
        if q is not None and q.traced is not None:
            return q.traced.hit.in_features, f"input width of Q projection {q.traced.hit.node.name}"
        if q is not None and q.fused_in is not None:
            return q.fused_in, f"input width of packed weight {q.fused_weight}"
        if self.output is not None:
            return self.output.out_features, f"output width of {self.output.node.name}"
        return None

    def _latent_inputs(self) -> bool:
        """Latent (low-rank) attention, as DeepSeek's MLA: Q's, K's or V's projection reads a
        narrower tensor than the O projection writes, which another projection made from an input
        as wide as O's output (``self.latent``: role -> that down-projection)."""
        o = self.output
        if o is None:
            return False
        for role in ("q", "k", "v"):
            r = self.roles.get(role)
            if r is None or r.traced is None or r.traced.hit.in_features == o.out_features:
                continue
            hit = r.traced.hit
            down = _made_by_projection(self.index, hit.activation)
            if down is None or down.in_features != o.out_features or down.out_features < hit.in_features:
                continue
            self.latent[role] = down
        return bool(self.latent)

    def _latent_kv(self) -> bool:
        """Whether K/V are up-projected from a latent a down-projection made (latent attention)."""
        if not self._latent_inputs():
            return False
        kv = self.roles.get("v") if "v" in self.latent else self.roles.get("k")
        return kv is not None and kv.traced is not None and self.output is not None

    def _build_latent(self, taken_names: set[str]) -> AttentionBlock:
        """A latent-attention block (``mhainspect.matchers.latent``): the widths of Q's, the K/V
        up-projection's and O's weights and of the K/V down-projection fix the heads and head
        sizes; K and V are the up-projection's shares; the down-projections and the norms between
        them and the up-projections are counted in its total as ``params.latent``."""
        # Imported at the latent door: the latent solver (and the name grouping it shares with the
        # checkpoint readers) is for graphs with a K/V down-projection only.
        from mhainspect.matchers.latent import LatentShapes, kv_up_split, solve

        kv_role = "v" if "v" in self.latent else "k"
        kv_traced = self.roles[kv_role].traced
        assert kv_traced is not None and self.output is not None
        up, kv_down, o = kv_traced.hit, self.latent[kv_role], self.output
        q = self.roles.get("q")
        q_hit = q.traced.hit if q is not None and q.traced is not None else None
        q_down = self.latent.get("q")
        shapes = LatentShapes(q_hit.out_features if q_hit is not None else None, kv_down.out_features,
                              up.in_features, up.out_features, o.in_features,
                              q_rank=q_down.out_features if q_down is not None else None)
        sol = solve(shapes, self.evidence)
        self.evidence.extend(sol.evidence)
        tensors: list[str] = []
        for down, after in ((q_down, q_hit), (kv_down, up)):
            if down is None or after is None:
                continue
            name = down.weight.tensor.display_name
            self.latent_parts[name] = down.weight_params + down.bias_params
            tensors.extend(x for x in (name, down.bias_name) if x)
            for t in _norm_tensors(self.index, after.activation, down.node, after.in_features):
                self.latent_parts[t.display_name] = t.numel
                tensors.append(t.display_name)
        for name, n in self.latent_parts.items():
            self.evidence.append(Evidence("latent", n, EvidenceSource.WEIGHT_SHAPE,
                                          f"{name}: latent attention's down-projection or norm"))
        self.evidence.append(Evidence("d_model", kv_down.in_features, EvidenceSource.WEIGHT_SHAPE,
                                      f"input width of {kv_down.node.name}, the K/V down-projection"))
        projections: list[Projection] = []
        if q_hit is not None:
            projections.append(_whole("q", q_hit))
        split = kv_up_split(up.out_features, sol.num_heads, sol.nope, sol.d_v)
        if split is None:
            projections.append(_whole("k", up))
        else:
            for role, rows in zip(("k", "v"), split):
                share = Fraction(rows, up.out_features)
                projections.append(Projection(role, up.weight.tensor.display_name, up.in_features, rows,
                                              int(up.weight_params * share), up.bias_name,
                                              int(up.bias_params * share), up.node.name))
        projections.append(_whole("o", o))
        h = sol.num_heads if split is not None else None
        projections_t = tuple(projections)
        latent = sol.latent
        from mhainspect.results.optional import LatentKV  # with the latent solver: an MLA block only

        return AttentionBlock(
            name=block_name(self.index, self.anchor, projections_t, taken_names), matcher=self.matcher,
            kind=self._kind(), num_heads=h, num_kv_heads=h, d_model=kv_down.in_features, d_k=sol.d_k, d_v=sol.d_v,
            params=ParamBreakdown.from_projections(projections_t, extra=sum(self.extras.values()),
                                                   latent=sum(self.latent_parts.values())),
            projections=projections_t, evidence=tuple(self.evidence), scale=self.scale, scale_known=self.scale_known,
            anchor=self.anchor.name, conflicts=sol.conflicts,
            unknown_reason=None if h is not None else (
                f"latent attention: the K/V up-projection {up.node.name} ({up.out_features} outputs) cannot be split "
                "into K and V with the widths found"),
            latent=None if latent is None else LatentKV(latent.kv_rank, latent.rope_dim, latent.q_rank, tuple(tensors)),
        )

    def _unknown_reason(self, wq: int | None) -> str:
        if self.notes:
            return "; ".join(self.notes)
        if wq is None:
            return "no Q projection weight found and no head dimension in the attention op's shapes"
        return "the head size is not a constant in the graph (Q's last dimension is computed at run time)"

    def _kind(self) -> BlockKind:
        """From the dataflow: "self" when Q and K read the same tensor (or tensors made of a common
        one); "cross" when they do not and K/V have a source of their own: both projections
        resolved and reading different tensors, or (a role without a projection) tensors that are
        inputs or stored tensors of the graph; "unknown" when a projection is not resolved and the
        tensors behind it are outputs of ops the walk does not see through (nothing shows a second
        source). "self" when the graph does not show where K comes from."""
        if self.kind is not None:
            return self.kind
        kv_down = self.latent.get("k") or self.latent.get("v")
        if "q" in self.latent and kv_down is not None:  # latent Q and K/V: where their latents come from
            a, b = _origins(self.index, self.latent["q"].activation), _origins(self.index, kv_down.activation)
            if a and b:
                return BlockKind.SELF if a & b else BlockKind.CROSS
        q, k = self.roles.get("q"), self.roles.get("k")
        if q is None or k is None:
            return BlockKind.SELF
        if self._start(q) == self._start(k):
            return BlockKind.SELF  # one start: the same origins (or none), "self" either way
        a, b = self._sources(q), self._sources(k)
        if not a or not b:
            return BlockKind.SELF
        if a & b:
            return BlockKind.SELF
        if _resolved(q) and _resolved(k):
            return BlockKind.CROSS
        # A role without a projection shows a second source only when what it reads is a graph input
        # or a stored tensor (an encoder's cached K/V); behind an op the walk does not see through,
        # it is unknown.
        producer = self.index.producer
        unresolved = (a if not _resolved(q) else set()) | (b if not _resolved(k) else set())
        return BlockKind.CROSS if all(x not in producer for x in unresolved) else BlockKind.UNKNOWN

    @staticmethod
    def _start(r: RoleInput) -> str:
        # A projected role: what its projection reads (memory Concat'ed before the input, as
        # Transformer-XL does, still shares the current input with Q).
        return r.traced.hit.activation if r.traced is not None else r.tensor

    def _sources(self, r: RoleInput) -> set[str]:
        start = self._start(r)
        return _origins(self.index, start) if start else set()

    def _with_norms(self, projections: tuple[Projection, ...], decision: assembly.Decision) -> tuple[Projection, ...]:
        """Q's and K's projections with the norm their path applies before the scores
        (``TracedProjection.path_norm``), when its weight fits the side (``assembly.norm_shared``)."""
        fit = {"q": (decision.q_width, decision.num_heads), "k": (decision.k_width, decision.num_kv_heads)}
        out: list[Projection] = []
        for p in projections:
            r = self.roles.get(p.role)
            tensors = r.traced.path_norm if r is not None and r.traced is not None and p.role in fit else ()
            shapes = [assembly.norm_shared(t.shape, decision.d_k, *fit[p.role]) for t in tensors]
            if tensors and None not in shapes and len(set(shapes)) == 1:
                p = dataclasses.replace(p, norm=tensors[0].display_name, norm_params=sum(t.numel for t in tensors),
                                        norm_shared=bool(shapes[0]))
            out.append(p)
        return tuple(out)

    def _projections(self, widths: dict[str, int | None], fractions: dict[str, Fraction | None]
                     ) -> tuple[Projection, ...]:
        """Q/K/V/O as counted; ``widths`` and ``fractions``: what width() and _fraction() give for
        each role (computed once per build)."""
        out: list[Projection] = []
        for role in ("q", "k", "v"):
            r = self.roles.get(role)
            if r is None:
                continue
            if r.traced is None:
                if r.fused_weight is not None:
                    out.append(Projection(role, r.fused_weight, r.fused_in, r.fused_width, r.fused_weight_params,
                                          r.fused_bias, r.fused_bias_params, r.fused_node))
                continue
            hit = r.traced.hit
            frac = fractions[role]
            width = widths[role]
            if frac is None:
                # Split unknown: the packed weight counts once, on the first role that reads it.
                first = next(x for x in ("q", "k", "v") if (y := self.roles.get(x)) is not None
                             and y.traced is not None and y.traced.hit.node is hit.node)
                frac = WHOLE if first == role else Fraction(0)
            if frac == 1:  # the whole projection: no Fraction arithmetic
                weight_params, bias_params = hit.weight_params, hit.bias_params
            else:
                weight_params = int(hit.weight_params * frac)
                bias_params = int(hit.bias_params * frac)  # a sliced bias is the product's width: split alike
            bias_name = hit.bias_name
            if r.traced.path_bias is not None:  # a bias added after the split of a bias-free packed product
                bias_name, bias_params = r.traced.path_bias.display_name, bias_params + r.traced.path_bias.numel
            if r.op_bias is not None:
                bias_name, bias_params = r.op_bias, bias_params + r.op_bias_params
            out.append(Projection(role, hit.weight.tensor.display_name, hit.in_features, width,
                                  weight_params, bias_name, bias_params, hit.node.name))
        if self.output is not None:
            o = self.output
            out.append(Projection("o", o.weight.tensor.display_name, o.in_features, o.out_features, o.weight_params,
                                  o.bias_name, o.bias_params, o.node.name))
        return tuple(out)


def _resolved(r: RoleInput) -> bool:
    """Whether a role's projection is known (traced to a weight, or a fused op's packed weight)."""
    return r.traced is not None or r.fused_weight is not None


# Ops between a Q/K source and the attention core that keep the values' origin (layout, casts, scaling).
_ORIGIN_THROUGH = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Expand", "Tile", "Flatten", "Mul", "Div",
                   "Concat"} | VALUE_PRESERVING_OPS  # casts and Q/DQ pairs too
_MAX_ORIGIN_NODES = 24


def _folded_sources(index: GraphIndex, name: str) -> tuple[str, ...]:
    """The parameters stored learned tokens were folded from (the exporter's provenance): two stored
    values folded from the same latents are made of a common tensor, as their unfolded graphs are."""
    t = index.graph.weights.get(name) if name in index.tokens else None
    if t is None:
        return ()
    return t.folded_params or ((t.origin,) if t.origin else ())


def _origins(index: GraphIndex, tensor: str) -> set[str]:
    """The tensors an attention input is made of, behind layout, casts, scaling and cache Concats:
    for Q or K without a projection, the graph input or the op output they come from."""
    found: set[str] = set()
    stack, seen = [tensor], {tensor}
    while stack and len(seen) < _MAX_ORIGIN_NODES:
        cur = stack.pop()
        node = index.producer.get(cur)
        if node is None or node.op not in _ORIGIN_THROUGH:
            found.add(cur)
            found.update(_folded_sources(index, cur))
            continue
        nxt = [x for x in node.inputs if x and index.is_activation(x)] if node.op in ("Mul", "Div", "Concat") \
            else node.inputs[:1]
        for x in nxt:
            if x not in seen:
                seen.add(x)
                stack.append(x)
    return found


_MAX_LATENT_NODES = 24  # a norm (RMSNorm: ~8 ops), a split and casts between the two projections


def _made_by_projection(index: GraphIndex, tensor: str) -> ProjectionHit | None:
    """The projection nearest behind ``tensor`` (through norms, splits, casts; never through an
    attention core), or None."""
    stack, seen = [tensor], {tensor}
    while stack and len(seen) < _MAX_LATENT_NODES:
        node = index.producer.get(stack.pop())
        if node is None or node.op == "Softmax":
            continue
        hit = recognise_projection(index, node)
        if hit is not None:
            return hit
        for x in node.inputs:
            if x and x not in seen and index.is_activation(x):
                seen.add(x)
                stack.append(x)
    return None


def _whole(role: str, hit: ProjectionHit) -> Projection:
    return Projection(role, hit.weight.tensor.display_name, hit.in_features, hit.out_features, hit.weight_params,
                      hit.bias_name, hit.bias_params, hit.node.name)


# Ops whose inputs after the first carry no data of the latent (shapes, split sizes).
_SHAPE_INPUTS = {"Reshape", "Split", "Slice", "Expand", "Tile", "Squeeze", "Unsqueeze", "Pad"}


def _norm_tensors(index: GraphIndex, start: str, down: Node, width: int) -> list[Tensor]:
    """The stored vectors ``width`` wide applied between a down-projection and the up-projection
    reading ``start``: the latent's norm (RMSNorm's scale, LayerNorm's scale and shift)."""
    found: dict[str, Tensor] = {}
    stack, seen = [start], {start}
    while stack and len(seen) < 2 * _MAX_LATENT_NODES:
        node = index.producer.get(stack.pop())
        if node is None or node is down or node.op in ("Shape", "Size", "Softmax"):
            continue
        inputs = node.inputs[:1] if node.op in _SHAPE_INPUTS else node.inputs
        for x in inputs:
            if not x or x in seen:
                continue
            seen.add(x)
            t = index.graph.weights.get(x)
            if t is None:
                stack.append(x)
            elif t.shape == (width,) and x not in found:
                found[x] = t
    return list(found.values())


def inverse_sqrt_dim(scale: float) -> int | None:
    """d when scale == 1/sqrt(d) for an integer d (within float tolerance)."""
    if scale <= 0:
        return None
    d = 1.0 / (scale * scale)
    r = round(d)
    if r >= 1 and math.isclose(d, r, rel_tol=1e-3):
        return int(r)
    return None
