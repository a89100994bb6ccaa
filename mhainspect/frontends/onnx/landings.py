"""Where a remote ONNX walk lands after each skipped payload, and the next landings predicted.

A tensor's payload length is known only once its header is read, so the place of the next header
is a chain of round trips, one a tensor. Layers repeat: the tensors of layer i + 1 have the names
of layer i's with the numbers moved on by the same steps, the same dtypes and dims, so the same
payload lengths and headers as long as their names. When the last tensors repeat so (with a
period: a layer's tensors), the next ones are predicted from those one period back, and their
headers fetched in parallel with the one needed now.

``remote_model_view`` walks a remote model so (``loader.read_onnx``): a local file never imports this module.

A prediction goes on only while it is checked: a predicted name must be one the graph's nodes
read (the nodes come before the initializers in a serialized graph, so they are held by then);
where the nodes are not known, a few layers ahead at most. A wrong prediction costs its window and
its request, never a wrong answer: the walk reads what is there, and a byte not held is fetched
when it is touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mhainspect.errors import InputError
from mhainspect.frontends.onnx.wire import WIRE_LEN, fields_at, stripped
from mhainspect.sources.blob import Blob, SparseView

GRAPH_NODE, NODE_INPUT = 1, 1  # onnx.proto: GraphProto.node, NodeProto.input

_MAX_PERIOD = 64  # tensors of one layer, the longest pattern looked for
_MAX_AHEAD = 1024  # tensors predicted in one round when each predicted name is checked
_UNCHECKED_PERIODS = 2  # layers predicted in one round when names cannot be checked
_HEAD_SLACK = 8  # bytes past a predicted header (its length predicted from its name)
_MAX_GUESS = 64 * 1024  # the most a landing fetches on no prediction (the longest recent header)
_NUMBER = re.compile(rb"\d+")


@dataclass(frozen=True)
class _Tensor:
    start: int  # where the tensor's field starts (its tag), or the last payload skipped before it ends
    head: int  # bytes from there to its payload (its header, and small fields kept whole before it)
    payload: int  # bytes of its payload (and whatever follows it in the field)
    name: bytes

    @property
    def end(self) -> int:
        return self.start + self.head + self.payload

    @property
    def template(self) -> bytes:
        return _NUMBER.sub(b"#", self.name)


class Landings:
    """The tensors walked so far (the walk calls ``tensor`` for each one whose payload it skipped,
    ``land`` before each field it reads) and the fetches of the landings to come."""

    def __init__(self, view: SparseView) -> None:
        self.view = view
        self.tensors: list[_Tensor] = []
        self.graph_start = -1  # where the main graph's fields start (set by the walk)
        self._inputs: frozenset[bytes] | None = None  # names the graph's nodes read, once known
        self.pending: tuple[int, bytes] | None = None  # (payload start, name) of the tensor being walked

    def graph_at(self, body: int) -> None:
        """The walk enters a field of the model at ``body``: the first is its graph (nodes first)."""
        if self.graph_start < 0:
            self.graph_start = body

    def tensor(self, start: int, end: int) -> None:
        """The tensor field [start, end) just walked; ``pending`` holds where its payload starts and
        its name when the walk skipped it."""
        if self.pending is None:
            return
        payload_at, name = self.pending
        self.pending = None
        if self._inputs is None and not self.tensors and 0 <= self.graph_start <= start:
            self._inputs = _node_inputs(self.view[self.graph_start:start])
        if self.tensors:  # what the walk needs from the last payload skipped to this one: small fields between too
            start = self.tensors[-1].end
        self.tensors.append(_Tensor(start, payload_at - start, end - payload_at, name))
        self.view.skipped_to = end  # a read-ahead after this reaches half of what is walked from here

    def land(self, pos: int) -> None:
        """The walk is about to read at ``pos``: if it is not held and comes right after a skipped
        payload, fetch it with the landings predicted after it, in parallel."""
        view = self.view
        if not self.tensors or view.holds(pos):
            return
        if self.tensors[-1].end != pos:
            return  # not after a skipped payload: the view's own read-ahead
        guess = min(max(t.head for t in self.tensors[-_MAX_PERIOD:]), _MAX_GUESS) + 2 * _HEAD_SLACK
        spans: list[tuple[int, int]] = []
        at, drift = pos, 0
        for head, payload, grown in self._predicted():
            if at >= len(view):
                break
            # A name longer by a digit (layer 9 -> 10): other names in the gap (a bias kept whole)
            # may have grown too, and each shifts what follows; the windows reach that much further.
            drift += 2 * grown
            spans.append((at, at + head + _HEAD_SLACK + drift))
            at += head + payload
        # The header needed now: a window too short costs a round trip, so at least the guess.
        spans[:1] = [(pos, max(pos + guess, spans[0][1] if spans else 0))]
        view.fetch_spans(spans)

    def _pattern(self) -> tuple[int, int]:
        """(period, run): the period the last tensors repeat with (same name but for its numbers,
        same payload, same header but for the name's length), and for how many tensors it holds;
        (0, 0) when none does. The longest run wins, then the shortest period."""
        ts = self.tensors[-2 * _MAX_PERIOD - 1:]
        best = (0, 0)
        for period in range(1, min(_MAX_PERIOD, len(ts) - 1) + 1):
            run = 0
            while run + period < len(ts) and _alike(ts[-1 - run], ts[-1 - run - period]):
                run += 1
            if run > best[1]:
                best = (period, run)
        return best

    def _predicted(self) -> list[tuple[int, int, int]]:
        """(header, payload, name growth) bytes of the tensors to come (the first: the one at the
        landing), each the tensor one period back with its numbers moved on by the step the last
        one moved by."""
        period, run = self._pattern()
        if not period:
            return []
        ts = self.tensors
        step = _step(ts[-1 - period].name, ts[-1].name)
        inputs = self._inputs or frozenset()
        sources = ts[-period:]
        checked = step is not None and any(t.name in inputs for t in sources)
        if not checked and run < period:
            return []  # nothing to check a prediction by: only a pattern seen twice whole
        ahead = min(max(2 * period, 2 * run), _MAX_AHEAD) if checked else _UNCHECKED_PERIODS * period
        out: list[_Tensor] = []
        grown: list[int] = []
        for k in range(ahead):
            base = sources[k] if k < period else out[k - period]
            name = _advance(base.name, step) if step is not None else base.name
            if checked and base.name in inputs and name not in inputs:
                break  # the graph reads no such tensor: the pattern ends here
            grown.append(max(0, len(name) - len(base.name)))
            out.append(_Tensor(0, base.head + len(name) - len(base.name), base.payload, name))
        return [(t.head, t.payload, g) for t, g in zip(out, grown)]


def _alike(a: _Tensor, b: _Tensor) -> bool:
    return a.payload == b.payload and a.head - len(a.name) == b.head - len(b.name) and a.template == b.template


def _step(before: bytes, after: bytes) -> tuple[int, ...] | None:
    """How much each number of a name moved between two tensors of the pattern (None: not alike)."""
    x, y = _NUMBER.findall(before), _NUMBER.findall(after)
    if len(x) != len(y):
        return None
    return tuple(int(b) - int(a) for a, b in zip(x, y))


def _advance(name: bytes, step: tuple[int, ...]) -> bytes:
    numbers = iter(step)
    return _NUMBER.sub(lambda m: str(int(m.group()) + next(numbers)).encode(), name)


def _node_inputs(graph: bytes) -> frozenset[bytes]:
    """The input names of the nodes in the serialized graph fields ``graph`` (the part before the
    first initializer: its nodes)."""
    names: set[bytes] = set()
    for number, body in _len_fields(graph):
        if number == GRAPH_NODE:
            names.update(value for n, value in _len_fields(body) if n == NODE_INPUT)
    return frozenset(names)


def _len_fields(buf: bytes) -> list[tuple[int, bytes]]:
    """(field number, value) of the length-delimited fields of a message; the walk stops at the
    first field it cannot read (the bytes held may end inside one)."""
    out: list[tuple[int, bytes]] = []
    try:
        for number, wire, body, end in fields_at(buf, 0, len(buf)):
            if wire == WIRE_LEN:
                out.append((number, buf[body:end]))
    except (IndexError, ValueError):  # the bytes held end inside a field, or a varint is too long
        pass
    return out


_HEAD_GUESS = 256  # bytes a jump fetches before any tensor header is read


def remote_model_view(blob: Blob) -> tuple[bytes, SparseView]:
    """The model's bytes minus the weight payloads the loader never reads, fetched by ranges: a
    first speculative range (the whole of a small file), then the spans the scanner touches (the
    graph's nodes and every tensor's header); payloads are skipped by their lengths, unfetched.
    And the view of the file that holds what was fetched (where a payload's values are read later,
    by ranges, when a copy check needs them)."""
    from mhainspect.sources.blob import FIRST_RANGE

    head = blob.read(0, FIRST_RANGE)
    size = blob.size()
    if size == 0:
        raise InputError(f"{blob.name}: file is empty")
    view = SparseView(blob, size)
    view.seed(0, head)
    if len(head) >= size:
        return head, view
    view.jump_window = _HEAD_GUESS
    try:
        return stripped(view, landings=Landings(view)), view
    except (ValueError, IndexError, RecursionError) as exc:
        raise InputError(f"{blob.name}: not a valid ONNX model (protobuf wire format: {exc})") from None
