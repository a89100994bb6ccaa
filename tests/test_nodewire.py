"""The compiled NodeProto decoder (mhainspect/loaders/_nodewire.c) against protobuf's own parser.

Its contract: whenever it returns, protobuf parses every blob as a NodeProto with exactly the fields it
returned; anything else is a ValueError, and the loader then takes its general path. The loader with
and without it gives the same ModelGraph.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import onnx
import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from mhainspect.loaders import onnx_loader, onnx_wire
from mhainspect.loaders.onnx_loader import model_to_graph, node_fields, read_model_proto

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted((REPO / "sample_models").glob("*.onnx"))
DECODE = onnx_wire.node_decoder()
needs_decoder = pytest.mark.skipif(DECODE is None, reason="the C node decoder is not built")


def test_ci_builds_the_decoder() -> None:
    """CI must test the compiled path, not fall back to protobuf without saying so."""
    if os.environ.get("CI") == "true" and not os.environ.get("MHAINSPECT_PURE_PYTHON"):
        assert DECODE is not None, "mhainspect.loaders._nodewire was not built (no C compiler?)"


def test_field_numbers_in_the_c_source_match_the_installed_descriptor() -> None:
    source = (REPO / "mhainspect" / "loaders" / "_nodewire.c").read_text()
    named = {m.group(1): int(m.group(2)) for m in re.finditer(r"\b(NODE_[A-Z_]+|ENTRY_[A-Z]+) = (\d+),", source)}
    node = onnx.NodeProto.DESCRIPTOR.fields_by_name
    entry = onnx.StringStringEntryProto.DESCRIPTOR.fields_by_name
    expected = {f"NODE_{name.upper()}": node[name].number
                for name in ("input", "output", "name", "op_type", "attribute", "domain", "metadata_props",
                             "device_configurations")}
    expected |= {"ENTRY_KEY": entry["key"].number, "ENTRY_VALUE": entry["value"].number}
    assert named == expected
    # every NodeProto field is either read or known to be skipped on purpose
    read_or_skipped = {f.name for f in onnx.NodeProto.DESCRIPTOR.fields} - {n[5:].lower() for n in named}
    assert read_or_skipped == {"doc_string", "overload"}


# NodeProto as the raw-attribute schema has it (attributes as their bytes): the decoder leaves each
# attribute to the loader, which parses it (once per distinct value) with AttributeProto.
RAW_ATTRIBUTE_NODE = onnx_wire._message_class(
    onnx_wire._bytes_fields_descriptor(onnx_wire._onnx_file_descriptor(), onnx_wire.RAW_ATTRIBUTES), "onnx.NodeProto")


def _upb_fields(blob: bytes) -> tuple[Any, ...]:
    node = RAW_ATTRIBUTE_NODE()
    node.ParseFromString(blob)
    op_type, domain, name, inputs, outputs, attributes, metadata = node_fields(node)
    return op_type, domain, name, tuple(inputs), tuple(outputs), tuple(attributes), metadata


@needs_decoder
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_node_decodes_as_protobuf_reads_it(path: Path) -> None:
    assert DECODE is not None
    blobs = [n.SerializeToString() for n in onnx.load(str(path), load_external_data=False).graph.node]
    assert DECODE(blobs) == [_upb_fields(b) for b in blobs]


_names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def _nodes(draw: Any) -> bytes:
    node = helper.make_node(draw(_names), draw(st.lists(_names, max_size=4)), draw(st.lists(_names, max_size=3)),
                            name=draw(_names), domain=draw(_names), doc_string=draw(_names))
    for i in range(draw(st.integers(0, 3))):
        node.attribute.append(helper.make_attribute(f"a{i}", draw(st.one_of(
            st.integers(-2**63, 2**63 - 1), st.lists(st.integers(-5, 5), min_size=1, max_size=4), _names,
            st.floats(allow_nan=False, width=32)))))
    for key, value in draw(st.lists(st.tuples(_names, _names), max_size=2)):
        node.metadata_props.add(key=key, value=value)
    blob = node.SerializeToString()
    # unknown fields and repeated singular fields (the last one wins) as other writers may leave them
    extra = draw(st.sampled_from([b"", b"\xf8\x01\x07", b"\x1a\x01z", b"\xa2\x06\x00", b"\x39" + b"\0" * 8,
                                  b"\x18\x05"]))
    return blob + extra


@needs_decoder
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_nodes())
def test_generated_nodes_decode_as_protobuf_reads_them(blob: bytes) -> None:
    assert DECODE is not None
    assert DECODE([blob]) == [_upb_fields(blob)]


@needs_decoder
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_nodes(), st.integers(0, 10**6), st.integers(0, 255), st.sampled_from(["flip", "cut", "insert"]))
def test_mutated_nodes_decode_only_as_protobuf_reads_them(blob: bytes, where: int, byte: int, how: str) -> None:
    """Whatever the decoder accepts, protobuf parses to the same fields, all of them text."""
    assert DECODE is not None
    i = where % (len(blob) + 1)
    mutated = {"flip": blob[:i] + bytes([byte]) + blob[i + 1:], "cut": blob[:i],
               "insert": blob[:i] + bytes([byte]) + blob[i:]}[how]
    try:
        decoded = DECODE([mutated])
    except ValueError:
        return  # left to the general path
    try:
        expected = _upb_fields(mutated)
    except DecodeError:
        pytest.fail(f"decoder accepted bytes protobuf rejects: {mutated!r}")
    assert decoded == [expected]
    assert all(isinstance(s, str) for s in (*expected[:3], *expected[3], *expected[4]))


@needs_decoder
@pytest.mark.parametrize("blob", [
    b"\x0a\x05ab",  # truncated string
    b"\x0a\x02\xff\xfe",  # not UTF-8 (protobuf hands proto2 strings back as bytes)
    b"\x00\x01",  # field number 0
    b"\x7b\x7c",  # a group (field 15)
    b"\x52\x00",  # device_configurations: protobuf validates what nothing here reads
    b"\x78" + b"\xff" * 10,  # varint over ten bytes
    b"\x4a\x03\x0a\x01\xff",  # metadata key not UTF-8
])
def test_what_the_decoder_cannot_vouch_for_is_a_value_error(blob: bytes) -> None:
    assert DECODE is not None
    with pytest.raises(ValueError):
        DECODE([blob])


def _overlong(value: int, size: int) -> bytes:
    """value as a varint of exactly size bytes (padded with continuation bytes, as some writers do)."""
    out = [(value >> 7 * i) & 0x7F | (0x80 if i < size - 1 else 0) for i in range(size)]
    assert value >> 7 * size == 0
    return bytes(out)


@needs_decoder
@pytest.mark.parametrize("size", range(1, 11))
def test_overlong_tags_and_lengths_only_as_far_as_protobuf_reads_them(size: int) -> None:
    """upb takes a tag or a length in at most 5 bytes (a varint value in 10): a longer one is corrupt."""
    assert DECODE is not None
    entry_tag = _overlong(1 << 3 | 2, size) + b"\x00"  # metadata_props entry: key ""
    entry_len = b"\x0a" + _overlong(0, size)
    blobs = {"tag": _overlong(4 << 3 | 2, size) + b"\x03Add", "length": b"\x22" + _overlong(3, size) + b"Add",
             "unknown varint": b"\x22\x03Add\x58" + _overlong(5, size),
             "entry tag": b"\x4a" + bytes([len(entry_tag)]) + entry_tag,
             "entry length": b"\x4a" + bytes([len(entry_len)]) + entry_len}
    for what, blob in blobs.items():
        try:
            expected = _upb_fields(blob)
        except DecodeError:
            with pytest.raises(ValueError):
                DECODE([blob])
            continue
        assert DECODE([blob]) == [expected], what  # what upb reads is read here too: the fast path stays


@needs_decoder
def test_non_bytes_and_failing_iterables() -> None:
    assert DECODE is not None
    relu = helper.make_node("Relu", ["x"], ["y"]).SerializeToString()
    for item in ("not bytes", bytearray(relu), memoryview(relu), None):  # upb hands over bytes only
        with pytest.raises(ValueError):
            DECODE([relu, item])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        DECODE(5)  # type: ignore[arg-type]

    def broken() -> Any:
        yield helper.make_node("Relu", ["x"], ["y"]).SerializeToString()
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        DECODE(broken())
    assert DECODE([]) == []


def _norm(graph: Any) -> tuple[Any, ...]:
    return (graph.nodes, sorted((k, repr(v)) for k, v in graph.weights.items()), graph.inputs, graph.outputs,
            graph.value_info, graph.opset, graph.producer, graph.warnings)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("decoder", ["compiled", "protobuf"])
def test_loader_gives_the_same_graph_with_either_node_reader(path: Path, decoder: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if decoder == "compiled" and DECODE is None:
        pytest.skip("the C node decoder is not built")
    if decoder == "protobuf":
        monkeypatch.setattr(onnx_loader, "node_decoder", lambda: None)
    fast = onnx_loader._load_raw_attributes(path, None)
    assert fast is not None
    assert _norm(fast) == _norm(model_to_graph(read_model_proto(path), source=str(path)))


@needs_decoder
def test_a_node_the_decoder_rejects_sends_the_file_to_the_general_path(tmp_path: Path) -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    node.device_configurations.add()  # valid, but left to protobuf
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    assert onnx_loader._load_raw_attributes(path, None) is None
    loaded = onnx_loader.load_onnx(path)
    assert [(n.name, n.op, n.inputs, n.outputs) for n in loaded.nodes] == [("r", "Relu", ("x",), ("y",))]
