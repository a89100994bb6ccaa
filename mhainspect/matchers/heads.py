"""Head counts a written-out attention shows without its projections: the head axis of the scores,
and the K/V heads before a grouped-query head repeat (Expand/Tile) on K's way to Q·Kᵀ."""

from __future__ import annotations

from mhainspect.ir.dataflow import VALUE_PRESERVING_OPS, GraphIndex
from mhainspect.ir.symbolic import Shape
from mhainspect.matchers.block import BlockBuilder
from mhainspect.results import EvidenceSource

_REPEAT_PATH = {"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Expand", "Tile", "Concat", "Slice",
                "Mul", "Div"} | VALUE_PRESERVING_OPS
_MAX_REPEAT_HOPS = 12


def offer_kv_repeat(index: GraphIndex, b: BlockBuilder, k_in: str, stop: set[str]) -> None:
    """K/V heads from a grouped-query head repeat on K's way to Q·Kᵀ: an Expand or Tile that grows
    a size-1 axis after the KV head axis ([B, g, 1, S, d] -> [B, g, h/g, S, d]: repeat_kv, the ONNX
    Attention body, torch's repeat_interleave), or a Tile that multiplies the head axis. Needs no
    projection weight. A Concat joins K to other rows along the sequence (a cache, nn.MultiheadAttention's
    ``bias_k``): every part is followed, and a part that is a stored parameter broadcast to the batch
    is not K, so its Tile is no head repeat."""
    frontier = [k_in]
    for _ in range(_MAX_REPEAT_HOPS):
        nxt: list[str] = []
        for cur in frontier:
            node = index.producer.get(cur)
            if node is None or node.name in stop or node.op not in _REPEAT_PATH or not node.inputs:
                continue
            if node.op in ("Expand", "Tile"):
                if index.weight(node.inputs[0]) is not None:
                    continue  # a learned row broadcast to the batch, not the projected K
                src, dst = index.shapes.shape(node.inputs[0]), index.shapes.shape(node.outputs[0])
                g = _repeated_heads(src, dst, node.op)
                if g is not None:
                    b.offer("num_kv_heads", g, EvidenceSource.SHAPE, f"KV head axis before the head repeat at "
                            f"{node.name} ({node.op} {shape_text(src)} -> {shape_text(dst)})")
                return
            # The value is input 0 (Concat: the cache or a learned bias row grows the sequence, the heads stay).
            nxt.extend(reversed([x for x in node.inputs if x]) if node.op == "Concat" else node.inputs[:1])
        if not nxt:
            return
        frontier = nxt


def _repeated_heads(src: Shape | None, dst: Shape | None, op: str) -> int | None:
    if src is None or dst is None or len(src) != len(dst):
        return None
    grown = [i for i, (a, c) in enumerate(zip(src, dst)) if a != c]
    if len(grown) != 1:
        return None
    i = grown[0]
    a, c = src[i], dst[i]
    if a.is_int and a.coef == 1 and c.is_int and c.coef > 1:
        # A size-1 axis grown by broadcast (Expand) or by repeats (Tile): the same values.
        if len(src) == 4:
            return 1  # [B, 1, S, d] -> [B, h, S, d]: one K/V head broadcast to all (multi-query)
        if len(src) >= 5 and i >= 1 and src[i - 1].is_int:
            return src[i - 1].coef  # [B, g, 1, S, d] -> [B, g, n_rep, S, d]: heads = g · n_rep, g outer
        return None
    if op == "Tile" and a.is_int and c.is_int and c.coef > a.coef:
        return a.coef  # [B, g, S, d] -> [B, h, S, d]: the head axis multiplied
    return None


def heads_from_scores(scores: Shape | None) -> int | None:
    if scores is None:
        return None
    if len(scores) == 4 and scores[-3].is_int:
        return scores[-3].coef
    if len(scores) == 3 and not scores[0].is_int and scores[0].coef > 1:
        return scores[0].coef  # batch and heads folded: (B·h, L, S)
    return None



def shape_text(shape: Shape | None) -> str:
    """"[2, 32, s, 128]" as evidence prints a shape; most dims are plain integers (str(Dim) is slow)."""
    return "[" + ", ".join([str(d.coef) if not d.factors else str(d) for d in shape or ()]) + "]"
