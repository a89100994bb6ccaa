"""The landings a remote ONNX walk predicts after a skipped payload (frontends/onnx/landings.py):
from the tensor one layer back, names moved on by the step the last one moved, checked against the
names the nodes read; the fetches they cost, counted on a blob that records its reads."""

from __future__ import annotations

from mhainspect.frontends.onnx.landings import Landings, _node_inputs
from mhainspect.sources.blob import MemoryBlob, SparseView

ROLES = (b"q", b"k", b"v")
PAYLOAD = {b"q": 4096, b"k": 1024, b"v": 1024}
HEADER = 20  # header bytes besides the name


def _name(i: int, role: bytes) -> bytes:
    return b"layers.%d.%s.weight" % (i, role)


class Counting(MemoryBlob):
    speculative = True

    def __init__(self, data: bytes) -> None:
        super().__init__(data, "m", "m")
        self.calls: list[tuple[int, int]] = []

    def read(self, offset: int, length: int) -> bytes:
        self.calls.append((offset, length))
        return super().read(offset, length)


def _walk(landings: Landings, tensors: int, at: int) -> int:
    """Walk the first ``tensors`` tensors of layers of three (q, k, v); returns where the walk is."""
    for t in range(tensors):
        role = ROLES[t % 3]
        name = _name(t // 3, role)
        landings.pending = (at + HEADER + len(name), name)
        landings.tensor(at, at + HEADER + len(name) + PAYLOAD[role])
        at = landings.tensors[-1].end
    return at


def _graph(names: list[bytes]) -> bytes:
    """GraphProto.node fields whose nodes read ``names``."""
    out = b""
    for n in names:
        node = b"\x0a" + bytes([len(n)]) + n
        out += b"\x0a" + bytes([len(node)]) + node
    return out


def _setup(layers_in_graph: int) -> tuple[Counting, SparseView, Landings, int]:
    graph = _graph([_name(i, r) for i in range(layers_in_graph) for r in ROLES])
    blob = Counting(graph + bytes(1_000_000))
    view = SparseView(blob, len(blob.data))
    view.seed(0, graph)
    landings = Landings(view)
    landings.graph_at(0)
    return blob, view, landings, len(graph)


def test_predictions_checked_by_node_inputs_stop_after_the_last_layer() -> None:
    blob, view, landings, start = _setup(layers_in_graph=12)
    end = _walk(landings, 4, start)  # layer 0 and the first tensor of layer 1
    predicted = landings._predicted()
    # The rest of layer 1 and layer 2 (twice the period: the pattern has held for one tensor).
    assert [p for _h, p, _g in predicted] == [1024, 1024, 4096, 1024, 1024, 4096]
    landings.land(end)
    assert [a for a, _n in sorted(blob.calls)][0] == end
    assert len(blob.calls) == len(predicted)  # each predicted header its own range, at once
    assert sum(n for _a, n in blob.calls) < 6 * 100  # header-sized windows
    end = _walk(landings, 33, start)
    assert len(landings._predicted()) == 3  # layer 11, whose names the graph reads, and no more
    _, _, done, start = _setup(layers_in_graph=12)
    _walk(done, 36, start)
    assert done._predicted() == []  # layer 11 walked: the graph reads no layers.12.*


def test_name_growth_widens_the_windows() -> None:
    blob, _, landings, start = _setup(layers_in_graph=20)
    end = _walk(landings, 27, start)  # layers 0-8
    predicted = landings._predicted()
    heads = [h for h, _p, _g in predicted]
    grown = [g for _h, _p, g in predicted]
    assert heads[:3] == [HEADER + len(_name(9, r)) for r in ROLES]
    assert heads[3] == HEADER + len(_name(10, b"q")) == heads[0] + 1
    assert grown[:4] == [0, 0, 0, 1]
    landings.land(end)
    windows = [n for _a, n in sorted(blob.calls)]
    assert len(windows) == len(predicted)  # a request a predicted header, none wasted on layers past 19
    # Layer 9's headers: their length and the slack; from layer 10 on, two bytes more a tensor
    # (a name a digit longer may shift what follows it).
    assert windows[1:3] == [heads[1] + 8, heads[2] + 8]
    assert windows[3:6] == [heads[3] + 8 + 2, heads[4] + 8 + 4, heads[5] + 8 + 6]


def test_without_node_names_a_whole_layer_twice_and_two_layers_ahead() -> None:
    blob = Counting(bytes(1_000_000))
    landings = Landings(SparseView(blob, len(blob.data)))
    _walk(landings, 5, 0)
    assert landings._predicted() == []  # layer 1 not whole yet: not a pattern seen twice
    again = Landings(landings.view)
    _walk(again, 6, 0)
    assert [p for _h, p, _g in again._predicted()] == [4096, 1024, 1024] * 2


def test_node_inputs_of_a_graph_cut_inside_a_node() -> None:
    graph = _graph([b"a", b"bb", b"ccc"])
    assert _node_inputs(graph) == {b"a", b"bb", b"ccc"}
    assert _node_inputs(graph[:-2]) == {b"a", b"bb"}


def test_read_ahead_after_a_skipped_payload_is_half_the_run_walked_since() -> None:
    """A miss at the end of the bytes held reads half of the run walked: since the last payload the
    walker skipped, not since the start of the held block (which then runs on into payloads)."""
    blob = Counting(bytes(1_000_000))
    view = SparseView(blob, len(blob.data))
    view.seed(0, blob.data[:100_000])
    view.skipped_to = 90_000
    _ = view[100_000]
    assert blob.calls == [(100_000, 5_000)]
    view.skipped_to = 0
    _ = view[105_000]
    assert blob.calls[-1] == (105_000, 52_500)  # no skip said: half the block held
