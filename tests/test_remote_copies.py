"""Exporter-made copies of parameters decided by their values over ranged reads: a remote ONNX
report equals the local one (mhainspect.ir.copies reads the same elements through
frontends/onnx/values.py), with inline weights, with external data (a few ranges of the data
file, never the whole of it), and where the values cannot be read (the data file missing: the same
fallback and the same warning as locally). Every case counts the requests and bytes it costs at the
server, against the walk's floor plus what docs/remote.md says a copy check costs."""

from __future__ import annotations

import contextlib
import io
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from remote_models import copy_check_floor, onnx_floor
from remote_servers import FileServer
from test_remote import KIB, report_json

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")

from mhainspect.frontends.onnx.loader import load_onnx  # noqa: E402
from mhainspect.ir.copies import copy_candidates  # noqa: E402
from mhainspect.pipeline import audit  # noqa: E402
from tests.conformance.zoo import _eval, _hf_quiet, count_params  # noqa: E402

pytestmark = pytest.mark.slow


class _Outputs(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any) -> Any:
        out = self.model(*args)
        return out if isinstance(out, tuple) else out.to_tuple()


def _hf(config_cls: str, model_cls: str, **cfg: Any) -> torch.nn.Module:
    import transformers

    _hf_quiet()
    torch.manual_seed(0)
    return _eval(getattr(transformers, model_cls)(getattr(transformers, config_cls)(**cfg)))  # noise on every parameter


def _export(model: torch.nn.Module, inputs: tuple[Any, ...], path: Path, dynamo: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(_Outputs(model), inputs, None, dynamo=True, verbose=False, report=False,
                                        opset_version=18)
            program.save(str(path), external_data=False)
        else:
            torch.onnx.export(_Outputs(model), inputs, str(path), dynamo=False, opset_version=17)


def _as_external(src: Path, dst: Path) -> None:
    """The same model with every tensor of 1 KiB or more in ``model.onnx.data`` beside it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(onnx.load(str(src)), str(dst), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)


def _opt() -> torch.nn.Module:
    return _hf("OPTConfig", "OPTForCausalLM", vocab_size=100, hidden_size=64, ffn_dim=128, word_embed_proj_dim=64,
               max_position_embeddings=32, num_hidden_layers=1, num_attention_heads=4, tie_word_embeddings=True,
               use_cache=False)


def _siglip() -> torch.nn.Module:
    return _hf("SiglipVisionConfig", "SiglipVisionModel", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
               num_attention_heads=4, image_size=16, patch_size=4)


CASES: dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], tuple[Any, ...]], bool]] = {
    "opt-torchscript": (_opt, lambda: (torch.randint(0, 100, (1, 8)), torch.ones(1, 8, dtype=torch.long)), False),
    "siglip-dynamo-static": (_siglip, lambda: (torch.randn(1, 3, 16, 16),), True),
    # The relative-position bias table gathered by its constant index, stored as onnx::Reshape_N [N*N, h].
    "swin-torchscript": (lambda: _hf("SwinConfig", "SwinModel", image_size=16, patch_size=2, embed_dim=8, depths=[2, 2],
                                     num_heads=[2, 4], window_size=2, mlp_ratio=1.0),
                         lambda: (torch.randn(1, 3, 16, 16),), False),
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """Each case inline (<case>/model.onnx) and with external data (<case>-ext/); the module's totals."""
    root = tmp_path_factory.mktemp("remote_copies")
    totals: dict[str, int] = {}
    for case, (build, inputs, dynamo) in CASES.items():
        model = build()
        totals[case] = count_params(model)
        _export(model, inputs(), root / case / "model.onnx", dynamo)
        _as_external(root / case / "model.onnx", root / f"{case}-ext" / "model.onnx")
    return root, totals


def _remote_cost(root: Path, rel: str) -> tuple[str, int, int]:
    """The remote report of ``rel`` and the requests and bytes it cost (model and data file)."""
    with FileServer(root) as s:
        remote = report_json(s.url(rel), base=s.url(""))
        cost = s.log.by_path
    paths = ("/" + rel, "/" + rel.rsplit("/", 1)[0] + "/model.onnx.data")
    return remote, sum(cost.get(p, [0, 0])[0] for p in paths), sum(cost.get(p, [0, 0])[1] for p in paths)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("external", [False, True], ids=["inline", "external"])
def test_remote_report_equals_local(exports: tuple[Path, dict[str, int]], case: str, external: bool,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from mhainspect.frontends.onnx import frontend

    root, totals = exports
    rel = f"{case}-ext/model.onnx" if external else f"{case}/model.onnx"
    path = root / rel
    local = report_json(path, base=str(root))
    remote, requests, sent = _remote_cost(root, rel)
    assert remote == local
    assert audit(str(path)).model.total_params == totals[case]  # the values decided: the module's total
    assert "exporter-made copies of parameters" in local or "looked up" in local
    with monkeypatch.context() as m:  # the walk alone: what the file cost before values were read
        m.setattr(frontend, "folded_copies", lambda graph, *args: graph)
        _, walk_requests, walk_bytes = _remote_cost(root, rel)
    spans, _nbytes = copy_check_floor(path)
    print(f"{case} {'external' if external else 'inline'}: {requests} requests {sent:,} B; the walk alone "
          f"{walk_requests} requests {walk_bytes:,} B; the local copy check reads {spans} spans")
    assert walk_requests <= requests <= walk_requests + spans  # a range a local read at most (none: all held)
    assert requests - walk_requests <= 16  # here a few ranges: blocks and merged elements answer most reads
    assert sent - walk_bytes <= _nbytes
    # Only bytes of the tensors the rules ask about (a range is cut at its payload's ends): never a
    # byte of any other tensor, never a whole file for its own sake.
    graph = load_onnx(path)
    copies, sources = copy_candidates(graph.weights)
    asked = sum(graph.weights[n].numel * 4 for n in {*copies, *sources})
    assert sent - walk_bytes <= asked


def test_missing_data_file_falls_back_as_locally(exports: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    """Without the data file the values cannot be read: the copy stays counted as stored (a tied
    embedding twice), the lookup uncounted with the loader's warning; the remote report says the
    same as the local one, after one failed request for the data file."""
    root, _totals = exports
    for case in ("opt-torchscript", "siglip-dynamo-static"):
        shutil.copy(root / f"{case}-ext" / "model.onnx", tmp_path / f"{case}.onnx")
    for case in ("opt-torchscript", "siglip-dynamo-static"):
        local = report_json(tmp_path / f"{case}.onnx", base=str(tmp_path))
        with FileServer(tmp_path) as s:
            remote = report_json(s.url(f"{case}.onnx"), base=s.url(""))
            data = s.log.by_path.get("/model.onnx.data", [0, 0])
        assert remote == local
        assert 0 < data[0] <= 2  # the ranges of the first read (its first and last elements), not asked again
        assert "exporter-made copies" not in local
    assert "looked up by index buffers" in local  # the SigLIP lookup: not counted, and why


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external"])
def test_large_pair_costs_its_sample(tmp_path: Path, external: bool) -> None:
    """A pair past SMALL elements (a tied embedding [2048, 40] and its transposed copy) is decided by
    their first and last elements and a SAMPLE of each: 2 + SAMPLE ranges a tensor at most, a block
    each, never the tensors whole (320 KiB each)."""
    from test_folded_copies import _model, _table

    from mhainspect.frontends.onnx.values import BLOCK, MERGE_GAP
    from mhainspect.ir.copies import SAMPLE

    emb = _table(2048, 40)
    path = _model(tmp_path / "m.onnx", {"model.embed_tokens.weight": emb, "onnx::MatMul_7": emb.T.copy()},
                  [("Gather", "model.embed_tokens.weight"), ("MatMul", "onnx::MatMul_7")], external=external)
    local = report_json(path, base=str(tmp_path))
    assert "onnx::MatMul_7 [40, 2048] = model.embed_tokens.weight [2048, 40] transposed" in local
    with FileServer(tmp_path) as s:
        remote = report_json(s.url("m.onnx"), base=s.url(""))
        cost = s.log.by_path
    assert remote == local
    spans, kept = onnx_floor(path)
    requests = sum(r for r, _ in cost.values() if r) - cost.get("/config.json", [0])[0]
    sent = sum(b for _, b in cost.values())
    values = requests - (1 if external else spans)
    print(f"large pair {'external' if external else 'inline'}: {values} requests for values, {sent:,} B in all; floor {spans} spans {kept:,} B")
    assert 0 < values <= 2 * (2 + SAMPLE), cost
    assert sent <= 1.5 * kept + 64 * KIB + 2 * (2 + SAMPLE) * (2 * BLOCK + MERGE_GAP), cost


def test_sampled_lookup_reads_ahead(tmp_path: Path) -> None:
    """A lookup past SMALL elements (BERT's token types at static shapes, [1, 40, 3000]) is sampled
    slice by slice, a call a slice (40 along its rows, 3,000 along its columns): past EXACT_CALLS
    calls on one tensor, a range reads ahead, doubling, so the requests stay a few, not one a call."""
    import numpy as np
    from test_folded_copies import _dynamo_model, _table

    from mhainspect.frontends.onnx.values import EXACT_CALLS

    signature = {"emb.token_type.weight": "PARAMETER", "emb.token_type_ids": "BUFFER"}
    path = _dynamo_model(tmp_path / "m.onnx", {"embedding_1": np.repeat(_table(1, 1, 3000), 40, axis=1)},
                         {"embedding_1": ["emb.token_type.weight", "emb.token_type_ids"]}, signature)
    local = report_json(path, base=str(tmp_path))
    assert "embedding_1 (looked up in emb.token_type.weight) [1, 40, 3000] repeated: 3,000 parameters" in local
    with FileServer(tmp_path) as s:
        remote = report_json(s.url("m.onnx"), base=s.url(""))
        requests, sent = s.log.by_path["/m.onnx"]
    assert remote == local
    spans, kept = onnx_floor(path)
    size = path.stat().st_size
    print(f"sampled lookup: {requests} requests {sent:,} B (file {size:,} B); floor {spans} spans {kept:,} B")
    assert requests - spans <= 2 * EXACT_CALLS + 16  # not 3,040 calls' worth
    assert sent <= size  # nothing fetched twice


def test_many_permutations_stay_exact(tmp_path: Path) -> None:
    """A large candidate with equal dims is sampled through each permutation they allow (24 for
    [24, 24, 24, 24]): however many reads, each stays a few ranges of a few bytes, no read-ahead
    over the tensor (1.3 MB each)."""
    import numpy as np
    from test_folded_copies import _model, _table

    from mhainspect.ir.copies import SAMPLE

    source = _table(24, 24, 24, 24)
    copy = np.ascontiguousarray(source.transpose(3, 2, 0, 1))
    copy.flat[1:-1] *= 1.5  # the same dims and corners, other values: every permutation is tried, none holds
    path = _model(tmp_path / "m.onnx", {"blocks.0.weight": source, "onnx::Add_3": copy},
                  [("Add", "blocks.0.weight"), ("Add", "onnx::Add_3")])
    local = report_json(path, base=str(tmp_path))
    with FileServer(tmp_path) as s:
        remote = report_json(s.url("m.onnx"), base=s.url(""))
        requests, sent = s.log.by_path["/m.onnx"]
    assert remote == local
    spans, kept = onnx_floor(path)
    print(f"24 permutations: {requests} requests {sent:,} B; floor {spans} spans {kept:,} B")
    assert requests - spans > 24  # each permutation sampled
    assert requests - spans <= 2 + 24 * 2 * SAMPLE
    assert sent <= 1.5 * kept + 64 * KIB + (requests - spans) * 256  # a few elements a range: no read-ahead
