"""Exporter-made copies of a parameter, stored as a second tensor, are one parameter (mhainspect.ir.copies).

Graphs built with onnx.helper: each view an exporter's constant folding makes (transpose, permute,
reshape/unsqueeze, gather by a constant index, pad with constant zeros), inline and in external
data, and the near misses that must stay parameters of their own (same shape, other values; a
sample that agrees in its first and last elements only; all-zero data that proves nothing)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save_model

from mhainspect.frontends.dispatch import file_result
from mhainspect.frontends.onnx.frontend import data_files
from mhainspect.frontends.onnx.loader import load_onnx
from mhainspect.frontends.onnx.values import StoredValues
from mhainspect.ir.graph import Tensor
from mhainspect.ir.copies import copy_candidates, find_copies
from mhainspect.pipeline import audit_graph
from mhainspect.sources.blob import MappedView
from mhainspect.sources.transports.local import LocalTree

RNG = np.random.default_rng(7)


def _table(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.02 + 0.001).astype(np.float32)


def _model(path: Path, weights: dict[str, np.ndarray], uses: list[tuple[str, str]], *,
           external: bool = False) -> Path:
    """A graph reading each weight with one op: ("MatMul", name) multiplies the input x [*, k] by
    it; ("Gather", name) looks ids up in it; ("Add", name) adds it to x."""
    nodes, outputs = [], []
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
              helper.make_tensor_value_info("ids", TensorProto.INT64, None)]
    for i, (op, name) in enumerate(uses):
        out = f"y{i}"
        first = "ids" if op == "Gather" else "x"
        args = [name, first] if op == "Gather" else [first, name]
        nodes.append(helper.make_node(op, args, [out], name=f"n{i}"))
        outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
    inits = [numpy_helper.from_array(a, name) for name, a in weights.items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch")
    if external:
        save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                   location="weights.bin", size_threshold=0)
    else:
        save_model(model, str(path))
    return path


def _values(path: Path, weights: Mapping[str, Tensor]) -> StoredValues:
    """The ONNX reader's value reader of the local file ``path`` (its data files as the reader opens them)."""
    return StoredValues(weights, MappedView(path), data_files(LocalTree(path.parent), path.name))


def _audit(path: Path) -> tuple[int, list[str]]:
    result = file_result(str(path))
    return result.model.total_params, [w for w in result.warnings if "exporter-made copies" in w]


def _gathered(table: np.ndarray, window: int) -> np.ndarray:
    """Swin's relative-position bias: table [(2W-1)^2, h] gathered by the constant index -> [1, h, N, N]."""
    coords = np.stack(np.meshgrid(np.arange(window), np.arange(window), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (window - 1)
    index = rel[..., 0] * (2 * window - 1) + rel[..., 1]
    n = window * window
    return table[index.reshape(-1)].reshape(n, n, -1).transpose(2, 0, 1)[None].copy()


def test_transposed_tied_embedding_counts_once(tmp_path: Path) -> None:
    emb = _table(100, 16)
    path = _model(tmp_path / "m.onnx", {"model.embed_tokens.weight": emb, "onnx::MatMul_7": emb.T.copy()},
                  [("Gather", "model.embed_tokens.weight"), ("MatMul", "onnx::MatMul_7")])
    total, notes = _audit(path)
    assert total == emb.size
    assert len(notes) == 1 and "onnx::MatMul_7 [16, 100] = model.embed_tokens.weight [100, 16] transposed" in notes[0]


def test_transposed_copy_in_external_data(tmp_path: Path) -> None:
    emb = _table(100, 16)
    path = _model(tmp_path / "m.onnx", {"model.embed_tokens.weight": emb, "onnx::MatMul_7": emb.T.copy()},
                  [("Gather", "model.embed_tokens.weight"), ("MatMul", "onnx::MatMul_7")], external=True)
    assert _audit(path)[0] == emb.size
    (tmp_path / "weights.bin").unlink()  # no data to read: nothing is decided from values
    assert _audit(path) == (2 * emb.size, [])


def test_same_shape_other_values_stays_a_parameter(tmp_path: Path) -> None:
    emb = _table(100, 16)
    path = _model(tmp_path / "m.onnx", {"model.embed_tokens.weight": emb, "onnx::MatMul_7": _table(16, 100)},
                  [("Gather", "model.embed_tokens.weight"), ("MatMul", "onnx::MatMul_7")])
    assert _audit(path) == (2 * emb.size, [])


def test_a_copy_differing_inside_stays_a_parameter(tmp_path: Path) -> None:
    """First and last elements agree (the cheap first look), and so would most samples: the whole
    comparison of a small tensor finds the one element that differs."""
    emb = _table(100, 16)
    other = emb.T.copy()
    other[3, 41] += 1.0
    path = _model(tmp_path / "m.onnx", {"model.embed_tokens.weight": emb, "onnx::MatMul_7": other},
                  [("Gather", "model.embed_tokens.weight"), ("MatMul", "onnx::MatMul_7")])
    assert _audit(path) == (2 * emb.size, [])


def test_zeros_prove_nothing(tmp_path: Path) -> None:
    zeros = np.zeros((100, 16), np.float32)
    path = _model(tmp_path / "m.onnx", {"model.embed_tokens.weight": zeros, "onnx::MatMul_7": zeros.T.copy()},
                  [("Gather", "model.embed_tokens.weight"), ("MatMul", "onnx::MatMul_7")])
    assert _audit(path) == (2 * zeros.size, [])


def test_permuted_and_unsqueezed_views(tmp_path: Path) -> None:
    cube, flat = _table(3, 5, 7), _table(6, 10)
    path = _model(tmp_path / "m.onnx", {"blocks.0.table": cube, "blocks.0.proj": flat,
                                         "val_1": cube.transpose(2, 0, 1).copy(), "val_2": flat[None].copy()},
                  [("Add", "blocks.0.table"), ("Add", "val_1"), ("MatMul", "blocks.0.proj"), ("MatMul", "val_2")])
    total, notes = _audit(path)
    assert total == cube.size + flat.size
    assert "val_1 [7, 3, 5] = blocks.0.table [3, 5, 7] permuted (2, 0, 1)" in notes[0]
    assert "val_2 [1, 6, 10] = blocks.0.proj [6, 10] reshaped" in notes[0]


def test_gathered_table_with_its_source(tmp_path: Path) -> None:
    table = _table(9, 2)
    path = _model(tmp_path / "m.onnx", {"layer.relative_position_bias_table": table,
                                         "onnx::Add_3": _gathered(table, 2)},
                  [("Add", "layer.relative_position_bias_table"), ("Add", "onnx::Add_3")])
    total, notes = _audit(path)
    assert total == table.size
    assert "onnx::Add_3 [1, 2, 4, 4] = layer.relative_position_bias_table [9, 2] gathered" in notes[0]


def test_gathered_table_alone_counts_its_distinct_values(tmp_path: Path) -> None:
    table = _table(25, 3)  # window 3: (2*3-1)^2 offsets, 3 heads, gathered to [1, 3, 9, 9]
    path = _model(tmp_path / "m.onnx", {"onnx::Add_3": _gathered(table, 3)}, [("Add", "onnx::Add_3")])
    total, notes = _audit(path)
    assert total == table.size
    assert "onnx::Add_3 [1, 3, 9, 9] gathered: 75 parameters (its distinct values)" in notes[0]


def test_square_table_of_distinct_values_stays_whole(tmp_path: Path) -> None:
    path = _model(tmp_path / "m.onnx", {"onnx::Add_3": _table(1, 3, 9, 9)}, [("Add", "onnx::Add_3")])
    assert _audit(path) == (243, [])


def test_heads_with_different_patterns_are_no_gather(tmp_path: Path) -> None:
    """Repeats in each head, but not at the same positions: no one constant index made it."""
    gathered = _gathered(_table(9, 2), 2)
    gathered[0, 1] = gathered[0, 1].T  # a pattern of its own for the second head
    gathered[0, 1, 0, 1] = 0.5
    path = _model(tmp_path / "m.onnx", {"onnx::Add_3": gathered}, [("Add", "onnx::Add_3")])
    assert _audit(path) == (gathered.size, [])


def test_padded_table_alone_counts_its_inner_part(tmp_path: Path) -> None:
    emb = _table(1, 9, 8)
    padded = np.pad(emb, ((0, 0), (2, 2), (0, 0)))
    path = _model(tmp_path / "m.onnx", {"transpose_4": padded.transpose(0, 2, 1)[None].copy()},
                  [("MatMul", "transpose_4")])
    total, notes = _audit(path)
    assert total == emb.size
    assert "transpose_4 [1, 1, 8, 13] padded: 72 parameters (its inner part)" in notes[0]


def test_padded_table_with_its_source(tmp_path: Path) -> None:
    emb = _table(1, 9, 8)
    path = _model(tmp_path / "m.onnx", {"attn.emb_rel_k": emb, "onnx::MatMul_9": np.pad(emb, ((0, 0), (2, 2), (0, 0)))},
                  [("MatMul", "attn.emb_rel_k"), ("MatMul", "onnx::MatMul_9")])
    total, notes = _audit(path)
    assert total == emb.size
    assert "onnx::MatMul_9 [1, 13, 8] = attn.emb_rel_k [1, 9, 8] padded" in notes[0]


def test_table_without_zero_borders_stays_whole(tmp_path: Path) -> None:
    table = _table(1, 13, 8)
    table[0, 0, :] = 0.0  # one zero row is no padding unless the inside holds the rest
    table[0, 0, 0] = 0.25
    path = _model(tmp_path / "m.onnx", {"onnx::MatMul_9": table}, [("MatMul", "onnx::MatMul_9")])
    assert _audit(path) == (table.size, [])


def test_no_candidate_reads_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only module-path names (nothing an exporter made up): no value is read at all."""
    path = _model(tmp_path / "m.onnx", {"a.weight": _table(16, 8), "b.weight": _table(8, 16)},
                  [("MatMul", "a.weight"), ("MatMul", "b.weight")])
    graph = load_onnx(path)
    assert copy_candidates(graph.weights)[0] == []

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("values read without a candidate")

    monkeypatch.setattr(StoredValues, "__init__", refuse)
    assert _audit(path) == (256, [])


def test_large_pair_reads_a_bounded_sample(tmp_path: Path) -> None:
    """A pair past SMALL elements is decided by its first and last elements and one sample."""
    emb = _table(2048, 40)
    path = _model(tmp_path / "m.onnx", {"model.embed_tokens.weight": emb, "onnx::MatMul_7": emb.T.copy()},
                  [("Gather", "model.embed_tokens.weight"), ("MatMul", "onnx::MatMul_7")])
    graph = load_onnx(path)
    with _values(path, graph.weights) as reader:
        found = find_copies(graph.weights, reader)
        reads = reader.reads
    assert found["onnx::MatMul_7"].source == "model.embed_tokens.weight"
    assert reads <= 4 + 2 * 32


def test_masks_are_no_tables(tmp_path: Path) -> None:
    """A causal mask (its last row all zeros: a 'border', but -inf inside) and a padding mask broadcast
    over the heads (one pattern, but the same two values in every head) are neither padded nor gathered."""
    causal = np.triu(np.full((6, 6), -np.inf, np.float32), 1)[None, None].copy()
    broadcast = np.repeat(np.where(np.arange(16).reshape(1, 1, 4, 4) % 3 == 0, -1e4, 0.0).astype(np.float32), 2, axis=1)
    path = _model(tmp_path / "m.onnx", {"onnx::Add_1": causal, "onnx::Add_2": broadcast},
                  [("Add", "onnx::Add_1"), ("Add", "onnx::Add_2")])
    graph = load_onnx(path)
    with _values(path, graph.weights) as reader:
        assert find_copies(graph.weights, reader) == {}


def test_broadcast_table_counts_one_slice(tmp_path: Path) -> None:
    """A table expanded over the sequence (a row gathered by repeated indices, a bias broadcast):
    one slice, or the stored parameter it repeats."""
    row = _table(1, 1, 32)
    path = _model(tmp_path / "a.onnx", {"onnx::Add_1": np.repeat(row, 12, axis=1)}, [("Add", "onnx::Add_1")])
    total, notes = _audit(path)
    assert total == 32 and "onnx::Add_1 [1, 12, 32] repeated: 32 parameters (its distinct slices)" in notes[0]
    path = _model(tmp_path / "b.onnx", {"blocks.0.bias": row[0, 0], "onnx::Add_1": np.repeat(row, 12, axis=1)},
                  [("Add", "blocks.0.bias"), ("Add", "onnx::Add_1")])
    total, notes = _audit(path)
    assert total == 32 and "onnx::Add_1 [1, 12, 32] = blocks.0.bias [32] repeated" in notes[0]


def _dynamo_model(path: Path, weights: dict[str, np.ndarray], folded_from: dict[str, list[str]],
                  signature: dict[str, str]) -> Path:
    """A graph as the dynamo exporter writes one: each weight added to x, ``folded_from`` in value_info
    metadata, the program's graph signature (target -> PARAMETER / BUFFER) in the graph's metadata."""
    nodes = [helper.make_node("Add", ["x", name], [f"y{i}"], name=f"n{i}") for i, name in enumerate(weights)]
    infos = []
    for name, sources in folded_from.items():
        info = helper.make_tensor_value_info(name, TensorProto.FLOAT, list(weights[name].shape))
        entry = info.metadata_props.add()
        entry.key, entry.value = "pkg.onnxscript.optimizer.folded_from", repr(sources)
        infos.append(info)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(len(nodes))],
                              initializer=[numpy_helper.from_array(a, n) for n, a in weights.items()], value_info=infos)
    entry = graph.metadata_props.add()
    entry.key = "pkg.torch.export.ExportedProgram.graph_signature"
    entry.value = "\n".join(f"x_{i}: {kind} target='{target}'" for i, (target, kind) in enumerate(signature.items()))
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="pytorch"), str(path))
    return path


def test_parameter_gathered_by_a_buffer_is_that_parameter(tmp_path: Path) -> None:
    """SigLIP at static shapes: the position table gathered by its position_ids buffer is folded into
    'embedding' [1, 16, 32]; its values show every element once: the parameter's 512 (it was dropped
    as if it were a mask). A table folded from buffers alone (a rotary cache) stays no parameter."""
    signature = {"emb.weight": "PARAMETER", "emb.position_ids": "BUFFER", "rotary.inv_freq": "BUFFER"}
    path = _dynamo_model(tmp_path / "m.onnx", {"embedding": _table(1, 16, 32), "cos": _table(1, 16, 8)},
                         {"embedding": ["emb.weight", "emb.position_ids"], "cos": ["rotary.inv_freq", "emb.position_ids"]},
                         signature)
    total, notes = _audit(path)
    assert total == 512
    assert "embedding (looked up in emb.weight) [1, 16, 32] looked up: 512 parameters (each element once)" in notes[0]
    result = file_result(str(path))
    assert not [w for w in result.warnings if "looked up by index buffers" in w]  # the values decided


def test_lookup_that_cannot_be_read_stays_uncounted(tmp_path: Path) -> None:
    """Without its values, a lookup stays out of the count, with the loader's warning saying why."""
    signature = {"emb.weight": "PARAMETER", "emb.position_ids": "BUFFER"}
    path = _dynamo_model(tmp_path / "m.onnx", {"embedding": _table(1, 16, 32)},
                         {"embedding": ["emb.weight", "emb.position_ids"]}, signature)
    graph = load_onnx(path)
    assert copy_candidates(graph.weights)[0] == ["embedding"]
    with _values(tmp_path / "absent.onnx", graph.weights) as reader:
        assert find_copies(graph.weights, reader) == {}
    report = audit_graph(graph)  # the graph alone: no values
    assert report.model.total_params == 0
    (note,) = [w for w in report.warnings if "looked up by index buffers" in w]
    assert "'embedding' [1, 16, 32] from emb.weight" in note and "not counted as parameters (512 elements)" in note


def test_large_broadcast_is_sampled(tmp_path: Path) -> None:
    """Past SMALL elements, a tensor folded from a parameter and a buffer (BERT's token types looked
    up by zeros at static shapes) is sampled slice by slice: one row of 3,000 counts; rows of their own
    count all; rows repeated count once."""
    signature = {"emb.token_type.weight": "PARAMETER", "emb.token_type_ids": "BUFFER"}
    row = _table(1, 1, 3000)
    path = _dynamo_model(tmp_path / "m.onnx", {"embedding_1": np.repeat(row, 40, axis=1)},
                         {"embedding_1": ["emb.token_type.weight", "emb.token_type_ids"]}, signature)
    total, notes = _audit(path)
    assert total == 3000
    assert "embedding_1 (looked up in emb.token_type.weight) [1, 40, 3000] repeated: 3,000 parameters" in notes[0]
    rows = _table(1, 40, 3000)  # the same shape with every row its own: 120,000 parameters
    path = _dynamo_model(tmp_path / "n.onnx", {"embedding_1": rows},
                         {"embedding_1": ["emb.token_type.weight", "emb.token_type_ids"]}, signature)
    total, notes = _audit(path)
    assert total == rows.size and "looked up: 120,000 parameters (each element once, by sample)" in notes[0]
    partly = np.concatenate([rows[:, :10], rows[:, :10], rows[:, 10:30]], axis=1)  # rows 0-9 twice, 30 of their own
    path = _dynamo_model(tmp_path / "p.onnx", {"embedding_1": partly},
                         {"embedding_1": ["emb.token_type.weight", "emb.token_type_ids"]}, signature)
    assert _audit(path)[0] == 30 * 3000


def test_a_zero_slice_on_one_side_is_no_padding(tmp_path: Path) -> None:
    """A rotary sin cache (row 0 is sin(0) = 0) and a table with a zero padding row at one end keep
    every element: a pad puts zeros on both sides."""
    table = _table(12, 16)
    table[0] = 0.0
    path = _model(tmp_path / "m.onnx", {"onnx::MatMul_9": table}, [("MatMul", "onnx::MatMul_9")])
    assert _audit(path) == (table.size, [])


def test_gathered_lookup_counts_the_table(tmp_path: Path) -> None:
    """Swin through the dynamo exporter: the bias table gathered by its relative_position_index
    buffer, folded into [1, h, N, N] (the table itself gone): the table's (2W-1)^2 * h parameters."""
    table = _table(9, 4)
    signature = {"attn.relative_position_bias_table": "PARAMETER", "attn.relative_position_index": "BUFFER"}
    path = _dynamo_model(tmp_path / "m.onnx", {"index_put": _gathered(table, 2)},
                         {"index_put": ["attn.relative_position_bias_table", "attn.relative_position_index"]},
                         signature)
    total, notes = _audit(path)
    assert total == table.size
    assert "index_put (looked up in attn.relative_position_bias_table) [1, 4, 4, 4] gathered: 36 parameters" in notes[0]


def _score_bias_model(path: Path, bias: np.ndarray, *, name: str = "onnx::Reshape_9", layout: str = "rows",
                      heads: int = 2, softmax: bool = True) -> Path:
    """Scores q·kᵀ [1, h, N, N] plus a stored bias moved into that layout, then a Softmax (or, without
    ``softmax``, a MatMul: no scores). ``layout``: "rows" [N·N, h] (Reshape to [N, N, h], Transpose,
    Unsqueeze: TorchScript's fold of Swin's table[index.view(-1)]), "cube" [N, N, h] (Transpose,
    Unsqueeze), "heads" [h, N, N] (Unsqueeze)."""
    n = int(round((bias.size // heads) ** 0.5))
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"])]
    inits = [numpy_helper.from_array(bias, name), numpy_helper.from_array(np.array([0], np.int64), "axes0")]
    moved = name
    if layout == "rows":
        inits.append(numpy_helper.from_array(np.array([n, n, heads], np.int64), "cube_shape"))
        nodes.append(helper.make_node("Reshape", [moved, "cube_shape"], ["cube"]))
        moved = "cube"
    if layout in ("rows", "cube"):
        nodes.append(helper.make_node("Transpose", [moved, ], ["per_head"], perm=[2, 0, 1]))
        moved = "per_head"
    nodes += [helper.make_node("Unsqueeze", [moved, "axes0"], ["bias4"]),
              helper.make_node("Add", ["scores", "bias4"], ["biased"]),
              helper.make_node("Softmax", ["biased"], ["y"], axis=-1) if softmax
              else helper.make_node("MatMul", ["biased", "q"], ["y"])]
    four = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, heads, n, 8]) for x in ("q", "k")]
    graph = helper.make_graph(nodes, "g", four, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=inits)
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch"), str(path))
    return path


def _gathered_rows(table: np.ndarray, window: int) -> np.ndarray:
    """Swin's table[index.view(-1)]: [N·N, h], its rows the table's, repeated (row 0 and row N+1
    are both the i-j=0 offset)."""
    return _gathered(table, window)[0].transpose(1, 2, 0).reshape(-1, table.shape[1]).copy()


def test_gathered_rows_added_to_the_scores_count_the_table(tmp_path: Path) -> None:
    """TorchScript folds Swin's table[relative_position_index.view(-1)] into [N·N, h] (or [N, N, h]),
    moved into [1, h, N, N] and added to the scores: the table's distinct rows, (2W-1)^2 * h, whatever
    the layout. Its first two rows differ (no zero, no [N, N] slices): only its place before the
    Softmax lets it be read whole."""
    table = _table(9, 2)
    rows = _gathered_rows(table, 2)
    assert rows.shape == (16, 2) and not np.array_equal(rows[0], rows[1])
    path = _score_bias_model(tmp_path / "rows.onnx", rows)
    total, notes = _audit(path)
    assert total == table.size
    assert "onnx::Reshape_9 [16, 2] repeated: 18 parameters (its distinct slices)" in notes[0]
    cube = rows.reshape(4, 4, 2)
    total, notes = _audit(_score_bias_model(tmp_path / "cube.onnx", cube, name="onnx::Transpose_9", layout="cube"))
    assert total == table.size
    assert "onnx::Transpose_9 [4, 4, 2] gathered rows: 18 parameters (its distinct rows)" in notes[0]
    path = _score_bias_model(tmp_path / "src.onnx", rows)  # with the table stored too: counted there
    graph = load_onnx(path)
    with _values(path, graph.weights) as reader:
        assert find_copies(graph.weights, reader) == {}  # nothing says the graph adds it to the scores
        found = find_copies(graph.weights, reader, graph.nodes)
    assert found["onnx::Reshape_9"].params == table.size


def test_gathered_rows_with_the_table_stored_count_once(tmp_path: Path) -> None:
    table = _table(9, 2)
    cube = _gathered_rows(table, 2).reshape(4, 4, 2)
    path = _score_bias_model(tmp_path / "m.onnx", cube, name="onnx::Transpose_9", layout="cube")
    import onnx

    model = onnx.load(str(path))  # the table itself, stored under its module path and added to x
    model.graph.initializer.append(numpy_helper.from_array(table, "attn.relative_position_bias_table"))
    model.graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, None))
    model.graph.node.append(helper.make_node("Add", ["x", "attn.relative_position_bias_table"], ["z"]))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    save_model(model, str(path))
    total, notes = _audit(path)
    assert total == table.size
    assert "onnx::Transpose_9 [4, 4, 2] = attn.relative_position_bias_table [9, 2] gathered rows" in notes[0]


@pytest.mark.parametrize("layout", ["rows", "cube", "heads"])
def test_learned_score_bias_of_distinct_rows_stays_whole(tmp_path: Path, layout: str) -> None:
    """A learned bias added to the scores whose rows are all its own ([N·N, h], [N, N, h], [h, N, N]):
    every element a parameter."""
    shape = {"rows": (16, 2), "cube": (4, 4, 2), "heads": (2, 4, 4)}[layout]
    bias = _table(*shape)
    assert _audit(_score_bias_model(tmp_path / "m.onnx", bias, layout=layout)) == (bias.size, [])


def test_gathered_rows_not_added_to_scores_are_not_read(tmp_path: Path) -> None:
    """The same [N·N, h] values multiplied in, not added before a Softmax: no candidate table, nothing read
    whole (the cost bound), every element counted as stored."""
    rows = _gathered_rows(_table(9, 2), 2)
    path = _score_bias_model(tmp_path / "m.onnx", rows, softmax=False)
    graph = load_onnx(path)
    with _values(path, graph.weights) as reader:
        assert find_copies(graph.weights, reader, graph.nodes) == {}
    assert _audit(path) == (rows.size, [])


def test_masks_added_to_the_scores_are_no_tables(tmp_path: Path) -> None:
    """Masks before the Softmax, in the layouts of a bias, read whole: a causal -inf mask and a two-valued
    padding mask repeated over its rows and the heads stay what they were (no copy of a parameter)."""
    causal = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    causal_rows = np.repeat(causal[..., None], 2, axis=2).reshape(16, 2)
    padding = np.where(np.arange(4) % 3 == 0, -1e4, 0.0).astype(np.float32)
    padding_cube = np.broadcast_to(padding[None, :, None], (4, 4, 2)).copy()
    for i, (bias, layout) in enumerate([(causal_rows, "rows"), (padding_cube, "cube"),
                                        (padding_cube.transpose(2, 0, 1).copy(), "heads")]):
        path = _score_bias_model(tmp_path / f"m{i}.onnx", bias, layout=layout)
        graph = load_onnx(path)
        with _values(path, graph.weights) as reader:
            assert find_copies(graph.weights, reader, graph.nodes) == {}, layout
