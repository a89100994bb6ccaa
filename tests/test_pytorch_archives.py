"""torch.export programs (.pt2) and TorchScript archives give the module's blocks and totals.

Each artifact is built here from a module (tests/pytorch_artifacts.py: nn.MultiheadAttention in a
block, the Annotated Transformer's heads at h = 8 and 1, a Hugging Face BERT and a GQA Llama,
random weights plus noise) and audited; its blocks, parameter totals, flags and size figures must
be the module's own. Hostile archives end in one line and exit 2, and nothing in them runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import pytorch_artifacts as pa  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import mhainspect  # noqa: E402
from mhainspect.cli.app import app  # noqa: E402
from mhainspect.errors import InputError  # noqa: E402
from mhainspect.frontends import zips  # noqa: E402
from mhainspect.render.json_render import report_to_dict  # noqa: E402
from mhainspect.results import AttentionBlock, Report  # noqa: E402

ERROR_PREFIX = "mhainspect: error:"


def layout(block: AttentionBlock) -> tuple[Any, ...]:
    p = block.params
    return (block.name, block.kind, block.num_heads, block.num_kv_heads, block.d_model, block.d_k, block.d_v,
            p.q, p.k, p.v, p.o, p.bias, p.total, p.extra, block.scale)


@pytest.fixture(scope="module")
def built() -> dict[str, pa.Built]:
    return {name: build() for name, build in pa.BUILDERS.items()}


@pytest.fixture(scope="module")
def module_reports(built: dict[str, pa.Built]) -> dict[str, Report]:
    out = {}
    for name, b in built.items():
        inputs = None if pa.is_transformers(b.module) else b.inputs
        out[name] = mhainspect.inspect(b.module, inputs)
    return out


@pytest.fixture(scope="module")
def pt2(built: dict[str, pa.Built], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pt2")
    return {name: pa.export_pt2(b, folder / f"{name}.pt2") for name, b in built.items()}


def assert_same_report(archive: Report, module: Report) -> None:
    """Blocks, totals, flags and size figures: the module's."""
    assert [layout(b) for b in archive.blocks] == [layout(b) for b in module.blocks]
    assert archive.model.total_params == module.model.total_params
    assert archive.model.trainable_params == module.model.trainable_params
    assert archive.model.attention_params == module.model.attention_params
    assert sorted((f.code, f.block) for f in archive.flags) == sorted((f.code, f.block) for f in module.flags)
    size_keys = ("weight_bytes", "weight_bytes_by_dtype", "weight_bytes_overhead")
    a, m = report_to_dict(archive), report_to_dict(module)
    assert {k: a["model"][k] for k in size_keys} == {k: m["model"][k] for k in size_keys}
    # The KV figures; the reason may name another source (a module's config, an archive's root class).
    kv_a, kv_m = (dict(d["model"]["kv_cache"], reason=None) for d in (a, m))
    assert kv_a == kv_m
    block_keys = ("weight_bytes", "kv_cache_bytes_per_token", "kv_cache_dtype", "kv_cache_status", "sliding_window")
    assert [{k: b[k] for k in block_keys} for b in a["blocks"]] == [{k: b[k] for k in block_keys} for b in m["blocks"]]


@pytest.mark.parametrize("name", list(pa.BUILDERS))
def test_pt2_gives_the_modules_report(name: str, pt2: dict[str, Path], module_reports: dict[str, Report],
                                      schema_validator: Any) -> None:
    report = mhainspect.inspect(pt2[name])
    assert report.blocks, "no block found"
    assert_same_report(report, module_reports[name])
    assert report.model.format == "torch.export"
    assert not list(schema_validator.iter_errors(report_to_dict(report)))


def test_pt2_dims_stay_symbols(pt2: dict[str, Path]) -> None:
    """Exported with dynamic batch and sequence: the heads come out of shapes with symbols."""
    report = mhainspect.inspect(pt2["annotated_h8"])
    (block,) = report.blocks
    reshapes = [e.detail for e in block.evidence if e.source == "reshape"]
    assert reshapes and all(d.endswith(", 8, 8]") for d in reshapes), reshapes
    assert block.matcher == "decomposed"


def _members_read(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The archive members an audit of ``path`` reads, in order."""
    read: list[str] = []
    original = zips.ZipArchive.read

    def spy(self: zips.ZipArchive, name: str, cap: int, what: str) -> bytes:
        read.append(name)
        return original(self, name, cap, what)

    monkeypatch.setattr(zips.ZipArchive, "read", spy)
    mhainspect.inspect(path)
    return read


def test_pt2_weights_are_never_read(pt2: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the JSON members are read: no member under data/weights/ but the weights' metadata."""
    read = _members_read(pt2["llama_gqa"], monkeypatch)
    assert read and all(n.endswith(".json") for n in read), read


def test_pt2_without_torch(pt2: dict[str, Path]) -> None:
    """A .pt2 archive is read without torch installed."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from mhainspect.cli.app import main\n"
            "main(sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-c", code, str(pt2["bert"]), "--format", "json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [b["num_heads"] for b in json.loads(proc.stdout)["blocks"]] == [4, 4]


def test_pt2_in_a_folder(pt2: dict[str, Path]) -> None:
    folder = pt2["mha_block"].parent
    result = CliRunner().invoke(app, ["inspect", str(folder), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    paths = {r["model"]["path"] for r in json.loads(result.stdout)["models"]}
    assert paths == {str(p) for p in pt2.values()}


# ----------------------------------------------------------------------------- rewritten archives


def _members(path: Path) -> Iterator[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            yield name, z.read(name)


def rewrite(path: Path, out: Path, edit: Callable[[str, bytes], bytes | None]) -> Path:
    """A copy of archive ``path`` with each member passed through ``edit`` (None drops it)."""
    with zipfile.ZipFile(out, "w") as z:
        for name, data in _members(path):
            new = edit(name, data)
            if new is not None:
                z.writestr(name, new)
    return out


def edit_json(suffix: str, change: Callable[[Any], None]) -> Callable[[str, bytes], bytes | None]:
    def edit(name: str, data: bytes) -> bytes:
        if not name.endswith(suffix):
            return data
        doc = json.loads(data)
        change(doc)
        return json.dumps(doc).encode()

    return edit


def test_older_archive_layout(pt2: dict[str, Path], module_reports: dict[str, Report], tmp_path: Path) -> None:
    """torch 2.1-2.4 wrote serialized_exported_program.json: read from the graph alone."""
    program = next(data for name, data in _members(pt2["llama_gqa"]) if name.endswith("models/model.json"))
    old = tmp_path / "old.pt2"
    with zipfile.ZipFile(old, "w") as z:
        z.writestr("serialized_exported_program.json", program)
        z.writestr("serialized_state_dict.pt", b"\x80\x02}q\x00.")
    report = mhainspect.inspect(old)
    assert [layout(b) for b in report.blocks] == [layout(b) for b in module_reports["llama_gqa"].blocks]


def test_several_programs_say_which_is_reported(pt2: dict[str, Path], tmp_path: Path) -> None:
    def edit(name: str, data: bytes) -> bytes:
        return data

    out = rewrite(pt2["mha_block"], tmp_path / "two.pt2", edit)
    with zipfile.ZipFile(out, "a") as z:
        program = next(d for n, d in _members(pt2["mha_block"]) if n.endswith("models/model.json"))
        prefix = next(n for n, _ in _members(pt2["mha_block"])).split("/")[0]
        z.writestr(f"{prefix}/models/decode.json", program)
    report = mhainspect.inspect(out)
    assert any("2 programs" in w and "'model'" in w for w in report.warnings), report.warnings


def _lie_about_shape(doc: Any) -> None:
    entry = next(iter(doc["config"].values()))
    entry["tensor_meta"]["sizes"] = [{"as_int": 4096}, {"as_int": 4096}]
    entry["tensor_meta"]["strides"] = [{"as_int": 4096}, {"as_int": 1}]


def _graph_disagrees(doc: Any) -> None:
    values = doc["graph_module"]["graph"]["tensor_values"]
    name = next(n for n in values if n.startswith("p_"))
    values[name]["sizes"] = [{"as_int": 7}] * len(values[name]["sizes"])


def _huge_int(doc: Any) -> None:
    node = doc["graph_module"]["graph"]["nodes"][0]
    node["inputs"][-1]["arg"] = {"as_int": 10**400}


def _dangling(doc: Any) -> None:
    node = doc["graph_module"]["graph"]["nodes"][-1]
    node["inputs"][0]["arg"] = {"as_tensor": {"name": "nowhere"}}


def _rank_700(doc: Any) -> None:
    values = doc["graph_module"]["graph"]["tensor_values"]
    values[next(iter(values))]["sizes"] = [{"as_int": 3}] * 700


def _not_a_graph(doc: Any) -> None:
    doc["graph_module"]["graph"] = ["not", "a", "graph"]


HOSTILE_EDITS: dict[str, tuple[Callable[[str, bytes], bytes | None], str]] = {
    "lies_about_shape": (edit_json("_weights_config.json", _lie_about_shape), "lies"),
    "graph_disagrees": (edit_json("models/model.json", _graph_disagrees), "its metadata says"),
    "huge_int": (edit_json("models/model.json", _huge_int), "not an int64"),
    "dangling": (edit_json("models/model.json", _dangling), "which nothing produces"),
    "rank_700": (edit_json("models/model.json", _rank_700), "700 dims"),
    "not_a_graph": (edit_json("models/model.json", _not_a_graph), "malformed torch.export program"),
    "not_json": (lambda n, d: b"{not json" if n.endswith("models/model.json") else d, "not JSON"),
    "deep_json": (lambda n, d: b"[" * 100_000 + b"]" * 100_000 if n.endswith("models/model.json") else d,
                  "nested too deeply"),
    "no_program": (lambda n, d: None if n.endswith("models/model.json") else d, ""),
}


@pytest.mark.parametrize("case", list(HOSTILE_EDITS))
def test_hostile_pt2_is_one_line(case: str, pt2: dict[str, Path], tmp_path: Path) -> None:
    edit, match = HOSTILE_EDITS[case]
    path = rewrite(pt2["mha_block"], tmp_path / f"{case}.pt2", edit)
    result = CliRunner().invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2, result.stdout[-2000:]
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX) and match in lines[0], result.stderr


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.9, 0.99])
def test_truncated_pt2(cut: float, pt2: dict[str, Path], tmp_path: Path) -> None:
    data = pt2["mha_block"].read_bytes()
    path = tmp_path / "cut.pt2"
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(InputError):
        mhainspect.inspect(path)


# ----------------------------------------------------------------------------- TorchScript

SCRIPTABLE = ("mha_block", "annotated_h8", "annotated_h1")  # transformers models do not script


@pytest.fixture(scope="module")
def torchscript(built: dict[str, pa.Built], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("torchscript")
    out = {f"{name}.trace": pa.trace_ts(b, folder / f"{name}.trace.pt") for name, b in built.items()}
    out.update({f"{name}.script": pa.script_ts(built[name], folder / f"{name}.script.pt") for name in SCRIPTABLE})
    return out


TS_CASES = [f"{name}.trace" for name in pa.BUILDERS] + [f"{name}.script" for name in SCRIPTABLE]


@pytest.mark.parametrize("case", TS_CASES)
def test_torchscript_gives_the_modules_report(case: str, torchscript: dict[str, Path],
                                              module_reports: dict[str, Report], schema_validator: Any) -> None:
    report = mhainspect.inspect(torchscript[case])
    assert report.blocks, "no block found"
    assert_same_report(report, module_reports[case.split(".")[0]])
    assert report.model.format == "torchscript"
    assert not list(schema_validator.iter_errors(report_to_dict(report)))


def test_scripted_mha_is_recognised_by_its_class_and_attributes(torchscript: dict[str, Path]) -> None:
    """A scripted nn.MultiheadAttention keeps num_heads and head_dim: the block is the module's."""
    (block,) = mhainspect.inspect(torchscript["mha_block.script"]).blocks
    assert block.matcher == "module"
    assert any(e.source == "module" and "nn.MultiheadAttention num_heads=4" in e.detail for e in block.evidence)


def test_traced_custom_attention_is_found_by_its_graph(torchscript: dict[str, Path]) -> None:
    """A traced module keeps no attributes: the Annotated Transformer's heads come from its views."""
    (block,) = mhainspect.inspect(torchscript["annotated_h8.trace"]).blocks
    assert block.matcher == "decomposed"
    assert [e.detail for e in block.evidence if e.source == "reshape"]


def test_torchscript_without_torch(torchscript: dict[str, Path]) -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "from mhainspect.cli.app import main\n"
            "main(sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-c", code, str(torchscript["llama_gqa.trace"]), "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [(b["num_heads"], b["num_kv_heads"]) for b in json.loads(proc.stdout)["blocks"]] == [(8, 2), (8, 2)]


def test_torchscript_reads_no_weight(torchscript: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Only pickles, code and constants of at most 64 bytes are read: no member under data/."""
    read = _members_read(torchscript["bert.trace"], monkeypatch)
    assert read and not any("/data/" in n for n in read), read


def _marker_code(marker: Path) -> Callable[[str, bytes], bytes]:
    def edit(name: str, data: bytes) -> bytes:
        if "/code/__torch__/pytorch_artifacts" in name and name.endswith(".py"):
            return f"import os\nos.system('touch {marker}')\n".encode() + data
        return data

    return edit


def _evil_pickle(marker: Path) -> Callable[[str, bytes], bytes]:
    def edit(name: str, data: bytes) -> bytes:
        if name.endswith("/data.pkl"):
            return b"\x80\x02cposix\nsystem\nq\x00X" + len(f"touch {marker}").to_bytes(4, "little") + \
                f"touch {marker}".encode() + b"q\x01\x85q\x02Rq\x03."
        return data

    return edit


def _short_storage(name: str, data: bytes) -> bytes:
    return data[:8] if name.endswith("/data/0") else data


def _ext_opcode(name: str, data: bytes) -> bytes:
    return b"\x80\x02\x82\x01." if name.endswith("/data.pkl") else data


def _top_level_call(name: str, data: bytes) -> bytes:
    ours = "/code/__torch__/pytorch_artifacts" in name and name.endswith(".py")
    return b"print('hello')\n" + data if ours else data


@pytest.mark.parametrize("case, match", [
    ("imports", "imports os"), ("evil_pickle", "not a TorchScript archive"), ("short_storage", "refused"),
    ("ext_opcode", "pickle opcode"), ("top_level_call", "at top level"), ("no_code", "")])
def test_hostile_torchscript_is_one_line_and_runs_nothing(case: str, match: str, torchscript: dict[str, Path],
                                                         tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    edits: dict[str, Callable[[str, bytes], bytes | None]] = {
        "imports": _marker_code(marker), "evil_pickle": _evil_pickle(marker), "short_storage": _short_storage,
        "ext_opcode": _ext_opcode, "top_level_call": _top_level_call,
        "no_code": lambda n, d: None if "/code/" in n else d}
    path = rewrite(torchscript["annotated_h8.trace"], tmp_path / f"{case}.pt", edits[case])
    result = CliRunner().invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2, result.stdout[-2000:]
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX) and match in lines[0], result.stderr
    assert not marker.exists(), "something from the archive ran"


@pytest.mark.parametrize("cut", [0.2, 0.5, 0.8, 0.97])
def test_truncated_torchscript(cut: float, torchscript: dict[str, Path], tmp_path: Path) -> None:
    data = torchscript["mha_block.trace"].read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(InputError):
        mhainspect.inspect(path)


def test_torchscript_and_pt2_in_a_folder(torchscript: dict[str, Path], pt2: dict[str, Path], tmp_path: Path) -> None:
    """A folder scan picks up .pt2 programs and TorchScript archives (.pt, .jit) beside checkpoints."""
    import shutil

    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(pt2["bert"], folder / "bert.pt2")
    shutil.copy(torchscript["bert.trace"], folder / "bert.pt")
    shutil.copy(torchscript["annotated_h8.script"], folder / "annotated.jit")
    result = CliRunner().invoke(app, ["inspect", str(folder), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    formats = {Path(r["model"]["path"]).name: r["model"]["format"] for r in json.loads(result.stdout)["models"]}
    assert formats == {"bert.pt2": "torch.export", "bert.pt": "torchscript", "annotated.jit": "torchscript"}


# ----------------------------------------------------------------------------- over HTTP


@pytest.mark.parametrize("rel", ["llama_gqa.pt2", "llama_gqa.trace.pt", "mha_block.script.pt", "cfg/mha_block.pt2"])
def test_archive_over_http_equals_local(rel: str, pt2: dict[str, Path], torchscript: dict[str, Path],
                                        tmp_path: Path) -> None:
    """A torch.export or TorchScript archive served over HTTP (read by ranges, its kind told by its
    member list, a config.json beside it read through the same tree) gives the local file's report."""
    from remote_servers import FileServer

    files = {"llama_gqa.pt2": pt2["llama_gqa"], "llama_gqa.trace.pt": torchscript["llama_gqa.trace"],
             "mha_block.script.pt": torchscript["mha_block.script"], "cfg/mha_block.pt2": pt2["mha_block"]}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    for name, source in files.items():
        (tmp_path / name).write_bytes(source.read_bytes())

    def text(source: str | Path, base: str) -> str:
        return json.dumps(report_to_dict(mhainspect.inspect(source)), sort_keys=True).replace(base, "<base>")

    local = text(tmp_path / rel, str(tmp_path))
    with FileServer(tmp_path) as server:
        remote = text(server.url(rel), server.url("").rstrip("/"))
        assert server.log.requests > 0
    assert remote == local
    assert ("config read from <base>/cfg/config.json" in local) == rel.startswith("cfg/")
