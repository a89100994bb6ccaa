"""One set of numeric limits for every reader (mhainspect.ir.limits): what a header may declare is
checked where it is decoded, so no renderer meets a number it cannot print."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mhainspect.cli.app import app
from mhainspect.errors import InputError
from mhainspect.ir import limits
from mhainspect.pipeline import audit

FORMATS = ["table", "json", "markdown", "html", "sarif", "github"]


def test_shape_problem() -> None:
    assert limits.shape_problem([4, 8]) is None
    assert limits.shape_problem([]) is None
    assert limits.shape_problem([0] + [2**62] * 3) is None  # zero elements: nothing overflows
    assert "700 dims" in (limits.shape_problem([3] * 700) or "")
    assert "int64" in (limits.shape_problem([3] * 60) or "")
    assert "negative" in (limits.shape_problem([4, -1]) or "")
    assert "past int64" in (limits.shape_problem([2**63]) or "")
    assert "not an integer" in (limits.shape_problem([4, 2.0]) or "")
    assert "not an integer" in (limits.shape_problem([True]) or "")
    assert "not a list" in (limits.shape_problem("4,4") or "")


def test_bounded_numel_stops_early() -> None:
    assert limits.bounded_numel([2**31, 2**31]) == 2**62
    assert limits.bounded_numel([2**32, 2**32]) is None
    assert limits.bounded_numel([10**400, 0]) == 0


@pytest.mark.parametrize("value, expected", [
    (8, 8), (0, None), (-4, None), (True, None), (8.0, None), ("8", None), (None, None), (10**400, None),
    (2**63 - 1, 2**63 - 1), (2**63, None), ([8], None)])
def test_config_int(value: object, expected: int | None) -> None:
    assert limits.config_int(value) == expected


@pytest.mark.parametrize("value, ok", [
    (0.125, True), (8, True), (math.nan, False), (math.inf, False), (-1.0, False), (0.0, False), (10**400, False),
    (True, False), ("0.125", False), (1e301, False)])
def test_config_float(value: object, ok: bool) -> None:
    assert (limits.config_float(value) is not None) is ok


def _safetensors(path: Path, entries: dict[str, object]) -> Path:
    raw = json.dumps(entries).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return path


@pytest.mark.parametrize("shape, why", [
    ([3] * 700, "700 dims"), ([2**40, 2**40], "int64"), ([4, -2], "negative"), ([4, "8"], "not an integer"),
    ([2**64], "past int64")])
@pytest.mark.parametrize("fmt", FORMATS)
def test_safetensors_shape_past_the_limits_is_one_line(shape: list[object], why: str, fmt: str, tmp_path: Path) -> None:
    path = _safetensors(tmp_path / "w.safetensors", {"a.q_proj.weight": {"dtype": "F32", "shape": shape,
                                                                          "data_offsets": [0, 0]}})
    result = CliRunner().invoke(app, ["inspect", str(path), "--format", fmt])
    assert result.exit_code == 2, result.stdout[-2000:]
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and why in lines[0] and "'a.q_proj.weight'" in lines[0], result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("offsets", [[-1, 4], [0, 2**64], [0.5, 4], ["0", "4"], [0]])
def test_safetensors_offsets_past_the_limits(offsets: list[object], tmp_path: Path) -> None:
    path = _safetensors(tmp_path / "w.safetensors", {"w": {"dtype": "F32", "shape": [1], "data_offsets": offsets}})
    with pytest.raises(InputError, match="malformed safetensors header entry 'w'"):
        audit(path)


def test_a_name_with_a_newline_stays_on_one_line(tmp_path: Path) -> None:
    path = _safetensors(tmp_path / "w.safetensors", {"a\nb": {"dtype": "F32", "shape": [3] * 70,
                                                               "data_offsets": [0, 0]}})
    with pytest.raises(InputError) as info:
        audit(path)
    assert "\n" not in str(info.value)


_HOSTILE_VALUES = ["1" + "0" * 400, "-8", "NaN", "Infinity", "\"8\"", "8.5", "true", "[8, -1]", "null", "1e400"]


def _folder(tmp_path: Path, value: str) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    d, h = 16, 4
    text = ('{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 16, '
            f'"num_attention_heads": {value}, "num_key_value_heads": {value}, "head_dim": {value}, '
            f'"sliding_window": {value}, "max_position_embeddings": {value}, "num_hidden_layers": 1, '
            f'"attention_multiplier": {value}, "query_pre_attn_scalar": {value}}}')
    (folder / "config.json").write_text(text)
    entries: dict[str, object] = {}
    offset = 0
    for role in ("q", "k", "v", "o"):
        entries[f"model.layers.0.self_attn.{role}_proj.weight"] = {"dtype": "F32", "shape": [d, d],
                                                                    "data_offsets": [offset, offset + d * d * 4]}
        offset += d * d * 4
    raw = json.dumps(entries).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    assert h  # the heads the weights allow; the config's values are what is hostile
    return folder


@pytest.mark.parametrize("value", _HOSTILE_VALUES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_hostile_config_values_render_everywhere(value: str, fmt: str, tmp_path: Path) -> None:
    folder = _folder(tmp_path, value)
    result = CliRunner().invoke(app, ["inspect", str(folder), "--format", fmt])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    if result.exit_code == 0:
        assert "1" + "0" * 300 not in result.stdout  # the absurd value is no count anywhere
        if fmt == "json":
            report = json.loads(result.stdout)
            assert report["blocks"][0]["num_heads"] is None, report["blocks"][0]
