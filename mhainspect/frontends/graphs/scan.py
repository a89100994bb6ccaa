"""The recurrent state of a selective scan (Mamba-2) or a delta rule (Gated DeltaNet), read from what
the graph does with its short causal convolution's output, where no weight's shape gives it.

Both mixers run one causal convolution over three streams at once and split its output in three:
Mamba-2 into x (heads × head_dim) and its B and C (groups × d_state each), Gated DeltaNet into q and
k (key heads × key head dim each) and v (value heads × value head dim). Each part is then reshaped to
[..., count, width] per head. The two parts alike (B and C; q and k) give the state's per-head width,
the third (x; v) its rows: the state is the third part's channels × the pair's per-head width
(Mamba-2: heads × head_dim × d_state; Gated DeltaNet: value heads × value head dim × key head dim),
what transformers' cache and an exported decoder's state tensor hold. The widths are the graph's
own shapes (``ir.symbolic``: the Split's outputs, the Reshapes' targets), never a guess: a split
that is not in three, parts no reshape gives per-head widths, or a pair that is not unique give
nothing."""

from __future__ import annotations

from collections.abc import Callable

from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import Node
from mhainspect.ir.symbolic import Dim

_WALK_LIMIT = 200  # nodes visited from the convolution's output (or a part) to the node looked for
_NOT_DATA = frozenset(("Shape", "Size"))  # a tensor's shape, not its values: not followed


def _forward(index: GraphIndex, start: str, wanted: Callable[[Node], bool]) -> Node | None:
    """The first node (breadth first along the data, not through shape reads) that is ``wanted``."""
    frontier, seen, visited = [start], {start}, 0
    while frontier and visited < _WALK_LIMIT:
        nxt: list[str] = []
        for tensor in frontier:
            for node, _ in index.users(tensor):
                visited += 1
                if node.op in _NOT_DATA:
                    continue
                if wanted(node):
                    return node
                for out in node.outputs:
                    if out and out not in seen:
                        seen.add(out)
                        nxt.append(out)
        frontier = nxt
    return None


def _ints(index: GraphIndex, name: str) -> tuple[int, ...] | None:
    shape = index.shapes.shape(name)
    if shape is None:
        return None
    out = []
    for d in shape:
        out.append(d.coef if d.is_int else -1)
    return tuple(out)


def _per_head(index: GraphIndex, part: str, width: int) -> tuple[int, int] | None:
    """(count, width per head) of the first reshape of ``part`` to [..., count, per head] (rank 4 or more)."""
    def splits_heads(n: Node) -> bool:
        shape = _ints(index, n.outputs[0]) if n.outputs else None
        return n.op == "Reshape" and shape is not None and len(shape) >= 4 and shape[-1] > 0 and shape[-2] > 0 \
            and shape[-1] * shape[-2] == width

    def last_of_target(n: Node) -> int | None:
        """The target's last entry, where the shapes were not folded: of its value, else of the last
        operand of the Concat that builds it from computed sizes and a constant."""
        if n.op != "Reshape" or len(n.inputs) < 2:
            return None
        target = index.shapes.value(n.inputs[1])
        last = target[-1] if target is not None and len(target) >= 4 else None
        if target is None and (concat := index.producer.get(n.inputs[1])) is not None and concat.op == "Concat" \
                and len(concat.inputs) >= 4:
            tail = index.shapes.value(concat.inputs[-1])
            last = tail[-1] if tail is not None and len(tail) == 1 else None
        return last.coef if isinstance(last, Dim) and last.is_int and last.coef > 0 and width % last.coef == 0 \
            else None

    node = _forward(index, part, splits_heads)
    if node is not None:
        shape = _ints(index, node.outputs[0])
        return (shape[-2], shape[-1]) if shape is not None else None
    node = _forward(index, part, lambda n: last_of_target(n) is not None)
    last = last_of_target(node) if node is not None else None
    return (width // last, last) if last else None


def _widths(index: GraphIndex, split: Node) -> list[int] | None:
    """The Split's parts' widths along its last axis: their folded shapes, else its split sizes."""
    out = []
    for name in split.outputs:
        shape = _ints(index, name)
        if shape is None or not shape or shape[-1] <= 0:
            break
        out.append(shape[-1])
    else:
        return out
    axis = split.attrs.int("axis")
    rank = len(index.shapes.shape(split.inputs[0]) or ())
    sizes = index.shapes.int_values(split.inputs[1]) if len(split.inputs) > 1 and split.inputs[1] else None
    if sizes is None or len(sizes) != 3 or min(sizes) <= 0 or axis not in (-1, rank - 1):
        return None
    return list(sizes)


def scan_state(index: GraphIndex, conv_output: str, heads: int | None) -> tuple[int, str] | None:
    """(recurrent elements, what says so) of the mixer whose causal convolution writes
    ``conv_output``, or None when the graph does not show them. ``heads``: the decay's length where
    one was found (the third part must hold that many heads)."""
    split = _forward(index, conv_output, lambda n: n.op == "Split" and len(n.outputs) == 3)
    if split is None:
        return None
    widths = _widths(index, split)
    if widths is None:
        return None
    per_head = [_per_head(index, out, w) for out, w in zip(split.outputs, widths)]
    found = []
    for third in range(3):
        a, b = (i for i in range(3) if i != third)
        pa, pb, pt = per_head[a], per_head[b], per_head[third]
        if widths[a] == widths[b] and pa is not None and pa == pb and pt is not None and heads in (None, pt[0]):
            found.append((widths[third] * pa[1], third, pa, pt))
    if not found or len({f[0] for f in found}) != 1:
        return None
    elements, third, pair, rows = found[0]
    parts = ", ".join(f"{w}" for w in widths)
    return elements, (f"the graph splits the convolution's output in three ({parts} channels, {split.name}) and "
                      f"reshapes part {third + 1} to {rows[0]} × {rows[1]} and the other two to {pair[0]} × {pair[1]} "
                      f"per head: state {widths[third]} × {pair[1]}")
