"""Hostile and broken model files, one builder per class, shared by tests/test_hostile_inputs.py and
scripts/hostile_table.py (which writes docs/robustness.md from them).

Every builder writes its input(s) into a fresh folder and returns the CLI arguments that audit
them. ``run_cli`` runs ``python -m mhainspect`` in a subprocess with a wall-clock timeout and an
address-space limit (RLIMIT_AS), so a hang or unbounded allocation fails the run instead of the
machine. Nothing here imports torch unless a case needs it.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import pickle
import random
import re
import resource
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_models"
STANDARD = SAMPLES / "standard_mha.onnx"
MEMORY_LIMIT = 4 << 30  # RLIMIT_AS of every CLI run: an unbounded allocation fails instead of swapping
PAYLOAD_MARKER = "PAYLOAD_RAN"  # a malicious pickle's payload creates this file next to it

# ------------------------------------------------------------------------------ running the CLI


@dataclass(frozen=True)
class CliRun:
    code: int | None  # None: killed by the timeout
    stdout: str
    stderr: str
    seconds: float

    @property
    def first_stderr_line(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[0] if lines else ""

    def observed(self) -> tuple[str, list[str]]:
        """What docs/robustness.md's *Observed* column says of this run (the first line of stderr,
        or on exit 0 the report's first warning), and the report's warnings."""
        if self.code != 0:
            return self.first_stderr_line, []
        try:
            warnings = [str(w) for w in json.loads(self.stdout).get("warnings", [])]
        except json.JSONDecodeError:
            return "stdout is not JSON", []
        return (f"warning: {warnings[0]}" if warnings else "report, no warning"), warnings


# ------------------------------------------------------------------------------ docs/robustness.md

ROBUSTNESS_DOC = REPO_ROOT / "docs" / "robustness.md"


def table_cell(text: str, limit: int = 220) -> str:
    """Text as one cell of the table: one line, at most ``limit`` characters, no | or backtick."""
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("|", "\\|").replace("`", "'") or "—"


# Parts of an observed line that depend on the process, not on the input: TorchScript numbers the
# classes it compiles in a process (``___torch_mangle_11``), so the count differs between a test run
# and the script's fresh subprocess.
_RUN_DEPENDENT = re.compile(r"___torch_mangle_\d+")


def comparable(line: str) -> str:
    """An observed line with its process-dependent parts masked, for comparing two runs."""
    return _RUN_DEPENDENT.sub("___torch_mangle_N", line)


def documented(case: Case, doc: str) -> tuple[str, str] | None:
    """(exit, observed) of ``case``'s row in the table ``doc``; None when it has no row."""
    start = f"| {table_cell(case.klass, 120)} | "
    for line in doc.splitlines():
        if line.startswith(start):
            cells = line[len(start):].split(" | ")  # expected, exit, time, `observed`, verdict
            return cells[1], comparable(" | ".join(cells[3:-1]).strip("`"))
    return None


_PR_CAPBSET_DROP = 24
_DAC_CAPABILITIES = (1, 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH: what lets root read a mode-000 file


def _drop_dac_capabilities() -> None:
    """Remove root's permission-bypassing capabilities from the bounding set (kept across exec)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _DAC_CAPABILITIES:
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) refused")


def can_run_unprivileged() -> bool:
    """Whether a child can be denied a mode-000 file: not root, or root able to drop capabilities."""
    if os.geteuid() != 0:
        return True
    try:
        proc = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=_drop_dac_capabilities, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _limits(unprivileged: bool) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        if unprivileged and os.geteuid() == 0:
            _drop_dac_capabilities()

    return apply


def run_cli(args: list[str], cwd: Path, *, timeout: float = 60, unprivileged: bool = False) -> CliRun:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "MHAINSPECT_DEBUG", "COLUMNS")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing is written but what -o says, bytecode included
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "mhainspect", *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, preexec_fn=_limits(unprivileged))
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return CliRun(None, out, err, time.perf_counter() - start)
    return CliRun(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry below ``folder`` (symlinks not followed) with its size and mtime."""
    out: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root, name)
            st = p.lstat()
            out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return out


# ------------------------------------------------------------------------------ protobuf by hand
# Deep or huge graphs are written straight in the wire format: onnx.helper cannot build a graph
# nested deeper than protobuf's own recursion limit, and building 100k NodeProtos is slow.


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(num: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _int_field(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value)


def wire_node(op: str, inputs: list[str], outputs: list[str], attributes: Sequence[bytes] = ()) -> bytes:
    return (b"".join(_field(1, i) for i in inputs) + b"".join(_field(2, o) for o in outputs) + _field(4, op)
            + b"".join(_field(5, a) for a in attributes))


def wire_graph(nodes: list[bytes], name: str, inputs: list[str], outputs: list[str]) -> bytes:
    return (b"".join(_field(1, n) for n in nodes) + _field(2, name)
            + b"".join(_field(11, _field(1, i)) for i in inputs) + b"".join(_field(12, _field(1, o)) for o in outputs))


def wire_model(graph: bytes, opset: int = 17) -> bytes:
    return _int_field(1, 8) + _field(7, graph) + _field(8, _field(1, "") + _int_field(2, opset))


def nested_if_model(levels: int) -> bytes:
    """An If whose then_branch holds an If ... ``levels`` deep."""
    inner = wire_graph([wire_node("Identity", ["x"], ["y0"])], "g0", [], ["y0"])
    for i in range(1, levels):
        attr = _field(1, "then_branch") + _field(6, inner) + _int_field(20, 5)  # type GRAPH
        inner = wire_graph([wire_node("If", ["c"], [f"y{i}"], [attr])], f"g{i}", [], [f"y{i}"])
    return wire_model(wire_graph(
        [wire_node("Identity", [f"y{levels - 1}"], ["y"])] if levels == 1 else
        [wire_node("If", ["c"], ["y"], [_field(1, "then_branch") + _field(6, inner) + _int_field(20, 5)])],
        "top", ["c", "x"], ["y"]))


def chain_model(n: int, op: str = "Relu") -> bytes:
    nodes = [wire_node(op, [f"t{i}" if i else "x"], [f"t{i + 1}"]) for i in range(n)]
    nodes.append(wire_node("Identity", [f"t{n}"], ["y"]))
    return wire_model(wire_graph(nodes, "chain", ["x"], ["y"]))


# ------------------------------------------------------------------------------ ONNX via helper


def _model(nodes: list[onnx.NodeProto], inits: Sequence[onnx.TensorProto] = (),
           inputs: list[onnx.ValueInfoProto] | None = None,
           value_info: Sequence[onnx.ValueInfoProto] = ()) -> onnx.ModelProto:
    ins = inputs if inputs is not None else [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])]
    graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=list(inits), value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _declared(name: str, dims: list[int], data_type: int = TensorProto.FLOAT) -> onnx.TensorProto:
    """A tensor that declares ``dims`` and holds no data (onnx.helper refuses impossible dims)."""
    t = TensorProto()
    t.name, t.data_type = name, data_type
    t.dims.extend(dims)
    return t


def _write(folder: Path, name: str, data: bytes | onnx.ModelProto) -> Path:
    p = folder / name
    p.write_bytes(data if isinstance(data, bytes) else data.SerializeToString())
    return p


def _standard() -> onnx.ModelProto:
    return onnx.load(str(STANDARD))


def _first(model: onnx.ModelProto, op: str) -> onnx.NodeProto:
    node: onnx.NodeProto = next(n for n in model.graph.node if n.op_type == op)
    return node


# ------------------------------------------------------------------------------ builders


def truncated(folder: Path) -> list[str]:
    data = STANDARD.read_bytes()
    return [_write(folder, "truncated.onnx", data[: len(data) // 2]).name]


def random_bytes(folder: Path) -> list[str]:
    return [_write(folder, "random.onnx", random.Random(7).randbytes(4096)).name]


def protobuf_not_model(folder: Path) -> list[str]:
    tensor = helper.make_tensor("t", TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    return [_write(folder, "tensor.onnx", tensor.SerializeToString()).name]


def cycle(folder: Path) -> list[str]:
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="n1"), helper.make_node("Add", ["x", "a"], ["b"], name="n2"),
             helper.make_node("Identity", ["b"], ["y"], name="n3")]
    return [_write(folder, "cycle.onnx", _model(nodes)).name]


def dangling(folder: Path) -> list[str]:
    nodes = [helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")]
    return [_write(folder, "dangling.onnx", _model(nodes)).name]


def duplicate_outputs(folder: Path) -> list[str]:
    m = _standard()
    first = m.graph.node[0]
    m.graph.node.insert(1, helper.make_node("Identity", [first.input[0]], [first.output[0]], name="impostor"))
    return [_write(folder, "duplicate_outputs.onnx", m).name]


def non_utf8(folder: Path) -> list[str]:
    """The producer name with a byte that is not UTF-8."""
    m = _standard()
    raw = m.producer_name.encode()
    data = m.SerializeToString().replace(b"\x12" + bytes([len(raw)]) + raw, b"\x12" + bytes([len(raw)]) + b"\xf0" + raw[1:], 1)
    return [_write(folder, "non_utf8.onnx", data).name]


def transpose_without_perm(folder: Path) -> list[str]:
    m = _standard()
    node = _first(m, "Transpose")
    del node.attribute[:]  # legal: perm defaults to reversing the axes
    return [_write(folder, "transpose_no_perm.onnx", m).name]


def reshape_without_shape(folder: Path) -> list[str]:
    m = _standard()
    node = _first(m, "Reshape")
    del node.input[1:]
    return [_write(folder, "reshape_no_shape.onnx", m).name]


def split_absurd(folder: Path) -> list[str]:
    m = _standard()
    q = m.graph.node[1].output[0]
    m.graph.node.append(helper.make_node("Split", [q], ["s0", "s1"], name="absurd_split", axis=-1,
                                         split=[2**62, -5], num_outputs=2**40))
    m.graph.node.append(helper.make_node("Split", [q], ["s2"], name="absurd_split_2", axis=2**40))
    return [_write(folder, "split_absurd.onnx", m).name]


def attribute_wrong_type(folder: Path) -> list[str]:
    m = _standard()
    for op in ("Transpose", "Softmax", "Gather"):
        node = _first(m, op)
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("perm" if op == "Transpose" else "axis", "not-an-int"))
    return [_write(folder, "attr_wrong_type.onnx", m).name]


def initializer_dims(dims: list[int], name: str) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        m = _standard()
        m.graph.initializer.append(_declared("absurd.weight", dims))
        m.graph.node.append(helper.make_node("MatMul", [m.graph.node[1].output[0], "absurd.weight"], ["absurd_out"],
                                             name="absurd_matmul"))
        return [_write(folder, name, m).name]

    return build


def value_info_dims(folder: Path) -> list[str]:
    m = _standard()
    for vi in m.graph.input:
        dims = vi.type.tensor_type.shape.dim
        for d, v in zip(dims, [-7, 0, 2**62, 2**63 - 1]):
            d.Clear()
            d.dim_value = v
    m.graph.value_info.append(helper.make_tensor_value_info(m.graph.node[0].output[0], TensorProto.FLOAT,
                                                            [2**62, -1, 0] + [1] * 100))
    return [_write(folder, "value_info_dims.onnx", m).name]


def shape_arithmetic_blowup(folder: Path) -> list[str]:
    """Mul(c, c) squares a constant 2000 times; Add(s, s) doubles a symbolic expression 2000 times."""
    nodes = [helper.make_node("Shape", ["x"], ["s0"])]
    nodes += [helper.make_node("Add", [f"s{i}", f"s{i}"], [f"s{i + 1}"]) for i in range(2000)]
    nodes += [helper.make_node("Mul", [f"c{i}", f"c{i}"], [f"c{i + 1}"]) for i in range(2000)]
    nodes += [helper.make_node("Reshape", ["x", "s2000"], ["r"]), helper.make_node("Reshape", ["r", "c2000"], ["y"])]
    c0 = helper.make_tensor("c0", TensorProto.INT64, [1], [3])
    return [_write(folder, "shape_blowup.onnx", _model(nodes, [c0])).name]


def nested(levels: int) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        return [_write(folder, f"nested_{levels}.onnx", nested_if_model(levels)).name]

    return build


def many_nodes(folder: Path) -> list[str]:
    return [_write(folder, "nodes_100k.onnx", chain_model(100_000)).name]


def many_softmax(folder: Path) -> list[str]:
    return [_write(folder, "softmax_100k.onnx", chain_model(100_000, "Softmax")).name]


def zip_as_onnx(folder: Path) -> list[str]:
    with zipfile.ZipFile(folder / "archive.onnx", "w") as z:
        z.writestr("model/data.txt", "not a model")
    return ["archive.onnx"]


def onnx_as(suffix: str) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        return [_write(folder, f"model{suffix}", STANDARD.read_bytes()).name]

    return build


def empty(suffix: str) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        return [_write(folder, f"empty{suffix}", b"").name]

    return build


def empty_directory(folder: Path) -> list[str]:
    (folder / "models").mkdir()
    return ["models"]


def directory_named_onnx(folder: Path) -> list[str]:
    (folder / "model.onnx").mkdir()
    return ["model.onnx"]


def unreadable(folder: Path) -> list[str]:
    p = _write(folder, "secret.onnx", STANDARD.read_bytes())
    p.chmod(0)
    return [p.name]


def symlink_loop(suffix: str) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        os.symlink(f"b{suffix}", folder / f"a{suffix}")
        os.symlink(f"a{suffix}", folder / f"b{suffix}")
        return [f"a{suffix}"]

    return build


def symlink_loop_directory(folder: Path) -> list[str]:
    (folder / "models").mkdir()
    os.symlink("../models", folder / "models" / "again")
    os.symlink("loop.onnx", folder / "models" / "loop.onnx")
    return ["models"]


def external_data(location: Callable[[Path], str], name: str) -> Callable[[Path], list[str]]:
    """standard_mha with its weights moved to external data at ``location(model_folder)``."""

    def build(folder: Path) -> list[str]:
        model_dir = folder / "model"
        model_dir.mkdir(exist_ok=True)
        loc = location(folder)
        m = _standard()
        for t in m.graph.initializer:
            if len(t.dims) == 2:
                t.ClearField("raw_data")
                t.data_location = TensorProto.EXTERNAL
                for key, value in (("location", loc), ("offset", "0"), ("length", "64")):
                    entry = t.external_data.add()
                    entry.key, entry.value = key, value
        _write(model_dir, name, m)
        return [f"model/{name}"]

    return build


def _outside_fifo(folder: Path) -> str:
    """A FIFO outside the model folder: opening it for reading would block forever."""
    fifo = folder / "outside.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    return "../outside.fifo"


def _inside_fifo(folder: Path) -> str:
    fifo = folder / "model" / "weights.fifo"
    fifo.parent.mkdir(exist_ok=True)
    if not fifo.exists():
        os.mkfifo(fifo)
    return "weights.fifo"


def _symlink_out(folder: Path) -> str:
    (folder / "model").mkdir(exist_ok=True)
    fifo = folder / "elsewhere.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    os.symlink("../elsewhere.fifo", folder / "model" / "weights.bin")
    return "weights.bin"


# -- PyTorch files --------------------------------------------------------------------------------


class _Payload:
    """Unpickling this runs ``touch PAYLOAD_RAN`` in the current folder."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {PAYLOAD_MARKER}",))


def malicious_pickle_zip(folder: Path) -> list[str]:
    import torch

    torch.save({"q_proj.weight": torch.zeros(4, 4), "payload": _Payload()}, folder / "evil.pt")
    return ["evil.pt"]


def malicious_pickle_raw(folder: Path) -> list[str]:
    (folder / "evil_legacy.bin").write_bytes(pickle.dumps({"payload": _Payload()}, protocol=2))
    return ["evil_legacy.bin"]


def zip_bomb(uncompressed: int) -> Callable[[Path], list[str]]:
    """A torch.save archive whose data.pkl is deflated and padded with ``uncompressed`` zero bytes
    (torch.save itself stores every record uncompressed)."""

    def build(folder: Path) -> list[str]:
        import torch

        buf = io.BytesIO()
        torch.save({"q_proj.weight": torch.zeros(4, 4)}, buf)
        src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
        with zipfile.ZipFile(folder / "bomb.pt", "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as out:
            for info in src.infolist():
                data = src.read(info.filename)
                if not info.filename.endswith("data.pkl"):
                    out.writestr(info.filename, data)
                    continue
                with out.open(info.filename, "w", force_zip64=True) as w:
                    w.write(data)
                    chunk = bytes(1 << 24)
                    for _ in range(uncompressed // len(chunk)):
                        w.write(chunk)
        return ["bomb.pt"]

    return build


def safetensors(header_len: int, header: bytes, name: str) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        (folder / name).write_bytes(struct.pack("<Q", header_len) + header)
        return [name]

    return build


# -- PyTorch archives and formats not read ----------------------------------------------------------


def foreign(kind: str, name: str) -> Callable[[Path], list[str]]:
    """A minimal file of a format mhainspect names but does not read (tests/foreign_files.py),
    under ``name``: its content, not its suffix, names it."""

    def build(folder: Path) -> list[str]:
        from foreign_files import BROKEN, FOREIGN

        made = (FOREIGN[kind][0] if kind in FOREIGN else BROKEN[kind][0])(folder)
        target = folder / name
        made.rename(target)
        return [name]

    return build


def safetensors_700_dims(folder: Path) -> list[str]:
    header = json.dumps({"q_proj.weight": {"dtype": "F32", "shape": [3] * 700, "data_offsets": [0, 0]}}).encode()
    return [_write(folder, "dims700.safetensors", struct.pack("<Q", len(header)) + header).name]


def config_absurd_values(folder: Path) -> list[str]:
    """A Hugging Face folder whose config.json holds 10**400, NaN and -8 where counts belong."""
    model = folder / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "hidden_size": 16, "num_attention_heads": 1'
                                       + "0" * 400 + ', "num_key_value_heads": NaN, "head_dim": -8, '
                                       '"sliding_window": 1e400}')
    entries, offset = {}, 0
    for role in ("q", "k", "v", "o"):
        entries[f"model.layers.0.self_attn.{role}_proj.weight"] = {"dtype": "F32", "shape": [16, 16],
                                                                    "data_offsets": [offset, offset + 1024]}
        offset += 1024
    header = json.dumps(entries).encode()
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(offset))
    return ["model", "--num-heads", "4"]  # the config gives no usable count: the option does


def _artifact(kind: str, name: str) -> Path:
    from pytorch_artifacts import annotated, export_pt2, trace_ts

    return {"pt2": export_pt2, "trace": trace_ts}[kind](annotated(2)(), Path(name))


def torch_artifact(kind: str, name: str, edit: Callable[[str, bytes], bytes | None] | None = None,
                   cut: float | None = None) -> Callable[[Path], list[str]]:
    """A .pt2 program or a traced TorchScript archive of the Annotated Transformer's attention,
    its members passed through ``edit`` (None drops one) or the file cut at ``cut`` of its length."""

    def build(folder: Path) -> list[str]:
        made = _artifact(kind, str(folder / f"clean_{name}"))
        if edit is not None:
            with zipfile.ZipFile(made) as src, zipfile.ZipFile(folder / name, "w") as out:
                for info in src.infolist():
                    data = edit(info.filename, src.read(info.filename))
                    if data is not None:
                        out.writestr(info.filename, data)
        elif cut is not None:
            data = made.read_bytes()
            (folder / name).write_bytes(data[:int(len(data) * cut)])
        else:
            made.rename(folder / name)
        if made.exists():
            made.unlink()
        return [name]

    return build


def _code_imports_os(name: str, data: bytes) -> bytes:
    if "/code/__torch__/pytorch_artifacts" in name and name.endswith(".py"):
        return f"import os\nos.system('touch {PAYLOAD_MARKER}')\n".encode() + data
    return data


def _weights_lie(name: str, data: bytes) -> bytes:
    if not name.endswith("_weights_config.json"):
        return data
    doc = json.loads(data)
    entry = next(iter(doc["config"].values()))
    entry["tensor_meta"]["sizes"] = [{"as_int": 4096}, {"as_int": 4096}]
    entry["tensor_meta"]["strides"] = [{"as_int": 4096}, {"as_int": 1}]
    return json.dumps(doc).encode()


# -- GGUF files (written by hand: no writer produces these) ---------------------------------------


def gguf(name: str, data: Callable[[], bytes]) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        return [_write(folder, name, data()).name]

    return build


def _gguf_truncated() -> bytes:
    from gguf_files import kv_bytes, raw_header

    return raw_header(1, 1) + kv_bytes(b"general.architecture", 8, struct.pack("<Q", 5) + b"lla")


def _gguf_counts() -> bytes:
    from gguf_files import raw_header

    return raw_header(2**63, 2**62)


def _gguf_huge_string() -> bytes:
    from gguf_files import kv_bytes, raw_header

    return raw_header(0, 1) + kv_bytes(b"general.name", 8, struct.pack("<Q", 2**62))


def _gguf_huge_array() -> bytes:
    """A 41-byte file declaring 2**40 uint8s: gguf-py's GGUFReader loops on it forever."""
    from gguf_files import kv_bytes, raw_header

    return raw_header(0, 1) + kv_bytes(b"k", 9, struct.pack("<IQ", 0, 2**40))


def _gguf_tensor(dims: list[int], gtype: int, offset: int, pad: int = 64) -> Callable[[], bytes]:
    def data() -> bytes:
        from gguf_files import raw_header, tensor_info_bytes

        return raw_header(1, 0) + tensor_info_bytes(b"blk.0.attn_q.weight", dims, gtype, offset) + bytes(pad)

    return data


# ------------------------------------------------------------------------------ the catalogue


@dataclass(frozen=True)
class Case:
    id: str
    klass: str  # the hostile-input class, as the issue names it
    build: Callable[[Path], list[str]]
    expect: str  # "error": exit 2 with one line; "report": exit 0; "warning": exit 0 and a warning
    match: str = ""  # substring of the error line (expect "error") or of a warning (expect "warning")
    torch: bool = False
    unprivileged: bool = False
    timeout: float = 60
    budget: float | None = None  # seconds the run must take at most (measured end to end)
    known_gap: str = ""  # a defect in a file this suite may not change: what is wrong and the fix


CASES: tuple[Case, ...] = (
    Case("truncated", "truncated protobuf", truncated, "error", "not a valid ONNX model"),
    Case("random_bytes", "random bytes", random_bytes, "error"),
    Case("protobuf_not_model", "valid protobuf that is not a model (a TensorProto)", protobuf_not_model, "error"),
    Case("non_utf8", "a string field that is not UTF-8 (producer_name)", non_utf8, "error", "UTF-8"),
    Case("cycle", "graph with a cycle", cycle, "error", "cycle"),
    Case("dangling", "dangling name (input nobody produces)", dangling, "error", "nowhere"),
    Case("duplicate_outputs", "duplicate outputs (two nodes produce one tensor)", duplicate_outputs, "warning",
         "produced by more than one node"),
    Case("transpose_no_perm", "Transpose without perm (legal)", transpose_without_perm, "report"),
    Case("reshape_no_shape", "Reshape without its shape input", reshape_without_shape, "report"),
    Case("split_absurd", "Split with absurd split / num_outputs / axis", split_absurd, "report"),
    Case("attr_wrong_type", "attributes of the wrong type (string perm/axis)", attribute_wrong_type, "report"),
    Case("init_negative", "initializer with a negative dim", initializer_dims([-4, 64], "init_negative.onnx"),
         "warning", "impossible shape"),
    Case("init_zero", "initializer with a zero dim", initializer_dims([0, 64], "init_zero.onnx"), "report"),
    Case("init_2e62", "initializer with a 2**62 dim", initializer_dims([2**62], "init_2e62.onnx"), "report"),
    Case("init_overflow", "initializer dims whose product overflows int64",
         initializer_dims([2**62, 2**62, 2**62], "init_overflow.onnx"), "warning", "impossible shape"),
    Case("value_info_dims", "value_info / input dims negative, zero, 2**62, rank 103", value_info_dims, "report"),
    Case("shape_blowup", "shape arithmetic that squares / doubles 2000 times", shape_arithmetic_blowup, "report",
         budget=20),
    Case("nested_40", "subgraphs nested 40 levels (If in If)", nested(40), "error"),
    Case("nested_100", "subgraphs nested 100 levels (If in If)", nested(100), "error"),
    Case("nodes_100k", "100k-node graph", many_nodes, "report", timeout=120, budget=30),
    Case("softmax_100k", "100k Softmax nodes (100k attention candidates)", many_softmax, "report", timeout=120,
         budget=30),
    Case("zip_as_onnx", "wrong extension: a zip archive named .onnx", zip_as_onnx, "error"),
    Case("onnx_as_pt", "wrong extension: an ONNX file named .pt", onnx_as(".pt"), "error", "not a PyTorch checkpoint",
         torch=True),
    Case("onnx_as_safetensors", "wrong extension: an ONNX file named .safetensors", onnx_as(".safetensors"), "error",
         "not a safetensors file"),
    Case("empty_onnx", "empty file (.onnx)", empty(".onnx"), "error", "empty"),
    Case("empty_pt", "empty file (.pt)", empty(".pt"), "error", torch=True),
    Case("empty_safetensors", "empty file (.safetensors)", empty(".safetensors"), "error"),
    Case("empty_directory", "directory without models", empty_directory, "error", "no models in this folder"),
    Case("directory_named_onnx", "directory named model.onnx", directory_named_onnx, "error"),
    Case("unreadable", "unreadable file (mode 000; as root, audited without CAP_DAC_OVERRIDE)", unreadable,
         "error", "permission denied", unprivileged=True),
    Case("symlink_loop", "symlink loop a.onnx -> b.onnx -> a.onnx", symlink_loop(".onnx"), "error", "symlink loop"),
    Case("symlink_loop_pt", "symlink loop a.pt -> b.pt -> a.pt", symlink_loop(".pt"), "error", "symlink loop"),
    Case("symlink_loop_dir", "directory holding a symlink loop and a folder loop", symlink_loop_directory, "error"),
    Case("external_dotdot", "external data location ../ (a FIFO outside the folder)",
         external_data(_outside_fifo, "dotdot.onnx"), "warning", "external data location", timeout=30),
    Case("external_absolute", "external data location /etc/passwd",
         external_data(lambda _: "/etc/passwd", "absolute.onnx"), "warning", "absolute path", timeout=30),
    Case("external_symlink_out", "external data location: a symlink pointing outside (to a FIFO)",
         external_data(_symlink_out, "symlink_out.onnx"), "warning", "symlink resolving outside", timeout=30),
    Case("external_fifo_inside", "external data location: a FIFO inside the folder (never opened)",
         external_data(_inside_fifo, "fifo_inside.onnx"), "report", timeout=30),
    Case("pickle_zip", "malicious pickle (torch.save archive, os.system payload)", malicious_pickle_zip, "error",
         "refused", torch=True),
    Case("pickle_raw", "malicious pickle (legacy raw pickle .bin)", malicious_pickle_raw, "error", "refused",
         torch=True),
    Case("zip_bomb", "zip bomb .pt (data.pkl deflated, 256 MiB inflated)", zip_bomb(256 << 20), "error",
         "compressed", torch=True),
    Case("safetensors_huge_header", "safetensors declaring a 2**60-byte header",
         safetensors(2**60, b"{}", "huge_header.safetensors"), "error", "header length"),
    Case("safetensors_not_json", "safetensors header that is not JSON",
         safetensors(10, b"not json!!", "not_json.safetensors"), "error", "not JSON"),
    Case("gguf_empty", "empty file (.gguf)", empty(".gguf"), "error", "empty"),
    Case("gguf_truncated", "GGUF truncated inside its header", gguf("truncated.gguf", _gguf_truncated), "error",
         "truncated"),
    Case("gguf_counts", "GGUF declaring 2**63 tensors and 2**62 keys", gguf("counts.gguf", _gguf_counts), "error",
         "more than its"),
    Case("gguf_huge_string", "GGUF string value of 2**62 bytes", gguf("string.gguf", _gguf_huge_string), "error",
         "needs"),
    Case("gguf_huge_array", "GGUF array of 2**40 elements in a 41-byte file (hangs gguf-py's reader)",
         gguf("array.gguf", _gguf_huge_array), "error", "elements of 'k'", budget=10),
    Case("gguf_negative_dim", "GGUF tensor with a negative dim (int64)",
         gguf("negative.gguf", _gguf_tensor([2**64 - 4, 2], 0, 0)), "error", "negative dim"),
    Case("gguf_overflow", "GGUF tensor dims whose product overflows int64",
         gguf("overflow.gguf", _gguf_tensor([2**40, 2**40], 0, 0)), "error", "int64"),
    Case("gguf_unknown_type", "GGUF tensor of unknown GGML type 99", gguf("type.gguf", _gguf_tensor([4], 99, 0)),
         "error", "unknown GGML type 99"),
    Case("gguf_offset_past_end", "GGUF tensor data past the end of the file",
         gguf("past_end.gguf", _gguf_tensor([1 << 20], 0, 0, pad=8)), "error", "past the end"),
    Case("safetensors_deep_json", "safetensors header of 100k nested JSON arrays",
         safetensors(200_000, b"[" * 100_000 + b"]" * 100_000, "deep.safetensors"), "error", "nested too deeply"),
    Case("safetensors_700_dims", "safetensors tensor of 700 dims of 3 (3**700 elements)", safetensors_700_dims,
         "error", "700 dims"),
    Case("config_absurd", "config.json with 10**400 heads, NaN kv heads, head_dim -8, window 1e400",
         config_absurd_values, "report"),
    Case("tflite_as_onnx", "a TensorFlow Lite file named .onnx", foreign("tflite", "model.onnx"), "error",
         "TensorFlow Lite"),
    Case("keras_as_pt", "a Keras archive named .pt", foreign("keras", "model.pt"), "error", "Keras archive"),
    Case("executorch", "an ExecuTorch program (.pte)", foreign("executorch", "model.pte"), "error", "ExecuTorch"),
    Case("lfs_pointer", "a Git LFS pointer named .safetensors", foreign("lfs_pointer", "model.safetensors"), "error",
         "Git LFS pointer"),
    Case("tensorrt", "a TensorRT engine", foreign("tensorrt", "model.engine"), "error", "TensorRT"),
    Case("torchscript", "a TorchScript archive (torch.jit.trace, code/ deflated)", torch_artifact("trace", "ts.pt"),
         "report", torch=True),
    Case("torchscript_imports", "a TorchScript code file that imports os and calls os.system",
         torch_artifact("trace", "imports.pt", _code_imports_os), "error", "imports os", torch=True),
    Case("torchscript_truncated", "a TorchScript archive cut at 60%", torch_artifact("trace", "cut.pt", cut=0.6),
         "error", torch=True),
    Case("pt2", "a torch.export program (.pt2)", torch_artifact("pt2", "model.pt2"), "report", torch=True),
    Case("pt2_lies", "a .pt2 whose weight metadata declares a shape its bytes cannot hold",
         torch_artifact("pt2", "lies.pt2", _weights_lie), "error", "lies", torch=True),
    Case("pt2_truncated", "a .pt2 cut at 70%", torch_artifact("pt2", "cut.pt2", cut=0.7), "error", torch=True),
)
