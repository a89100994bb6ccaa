"""Settings from ``[tool.mhainspect]`` in the nearest pyproject.toml, merged under the caller's (the CLI's
options, the Python API's keyword arguments).

The nearest pyproject.toml that has a ``[tool.mhainspect]`` table, looking from each model's own
folder upward (files without the table are skipped), as ruff does: the same model gates the same
way whatever the working directory. ``--config FILE`` names one file for every model and
``--isolated`` reads none. Keys mirror the CLI
options: max-params, max-attention-params, max-weight-bytes, max-kv-cache, context, batch,
kv-dtype, weight-dtype, decoder, gpu-memory, gpus, require-context, fail-on, ignore, exit-zero,
format, heads. Unknown
keys and bad values raise ConfigError with one line naming the file and the key. No printing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TypeVar

from mhainspect.analysis.gates import Limit, parse_byte_limit, parse_codes, parse_limit
from mhainspect.analysis.size import check_kv_dtype, check_weight_dtype
from mhainspect.errors import InputError, read_failure
from mhainspect.ir.units import parse_count, parse_tokens

__all__ = ["KEYS", "ConfigError", "Settings", "ConfigFinder", "find_config", "load_config_file", "load_settings", "merge",
           "settings_from_table"]

T = TypeVar("T")

KEYS = ("max-params", "max-attention-params", "fail-on", "ignore", "exit-zero", "format", "heads",
        "max-weight-bytes", "max-kv-cache", "context", "batch", "kv-dtype", "weight-dtype", "decoder",
        "gpu-memory", "gpus", "require-context")


class ConfigError(InputError):
    """A bad pyproject.toml or [tool.mhainspect] value; the message names the file and key."""


@dataclass(frozen=True)
class Settings:
    """Options from one source; None means "not set here" so another source may set it."""

    max_params: Limit | None = None
    max_attention_params: Limit | None = None
    fail_on: frozenset[str] | None = None
    ignore: frozenset[str] | None = None
    exit_zero: bool | None = None
    format: str | None = None
    heads: tuple[int, ...] | None = None
    max_weight_bytes: Limit | None = None
    max_kv_cache: Limit | None = None
    context: int | None = None
    batch: int | None = None
    kv_dtype: str | None = None
    weight_dtype: str | None = None
    decoder: bool | None = None  # --decoder / --no-decoder
    gpu_memory: int | None = None  # bytes per GPU
    gpus: int | None = None
    require_context: Limit | None = None  # tokens


def merge(first: Settings, second: Settings) -> Settings:
    """Field by field, ``first`` wins where it is set (CLI over config file)."""
    return Settings(**{
        f.name: getattr(first, f.name) if getattr(first, f.name) is not None else getattr(second, f.name)
        for f in fields(Settings)
    })


def _codes(value: object, *, severities: bool = False) -> frozenset[str]:
    if isinstance(value, str):
        return parse_codes([value], severities=severities)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return parse_codes(value, severities=severities)
    raise ValueError("expected a code or a list of codes, e.g. [\"MHA001\", \"MHA004\"]")


def _heads(value: object) -> tuple[int, ...]:
    out: list[int] = []
    for item in value if isinstance(value, list) else [value]:
        try:  # 16 or "16" ("1Ki"): the one rule of every typed number
            n = parse_count(item) if isinstance(item, (str, int)) and not isinstance(item, bool) else 0
        except ValueError:
            n = 0
        if n <= 0:
            raise ValueError("expected a positive integer or a list of them")
        out.append(n)
    return tuple(sorted(set(out)))  # listed in order, each once, however given


def shown_path(source: str) -> str:
    """A config path as messages show it: relative to the working directory when below it."""
    try:
        rel = os.path.relpath(source)
    except ValueError:  # another drive (Windows)
        return source
    return source if rel.startswith("..") else rel


def require_context_limit(value: str | int) -> Limit:
    """--require-context as a Limit: tokens as --context takes them (8192, 32k)."""
    return Limit(parse_tokens(value, "tokens"), str(value).strip())


def _limit(value: object, source: str) -> Limit:
    if isinstance(value, (str, int)):
        return replace(parse_limit(value), source=shown_path(source))
    raise ValueError("expected a count such as 7B, \"1.5M\" or 120000")


def _value(key: str, value: object, formats: Collection[str] | None, source: str) -> object:
    if key in ("max-params", "max-attention-params"):
        return _limit(value, source)
    if key in ("max-weight-bytes", "max-kv-cache"):
        if isinstance(value, (str, int)):
            return replace(parse_byte_limit(value), source=shown_path(source))
        raise ValueError("expected a size such as \"512M\", \"4GiB\" or 1048576")
    if key in ("context", "batch"):
        if not isinstance(value, (str, int)):
            raise ValueError("expected a whole number such as 8192 or \"8k\"")
        return parse_tokens(value, "tokens" if key == "context" else "sequences")
    if key == "gpu-memory":
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError("expected a size such as \"24GiB\" or \"80G\"")
        return parse_byte_limit(value).value
    if key in ("gpus", "require-context"):
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError("expected a whole number such as 2 or \"32k\"")
        if key == "gpus":
            return parse_tokens(value, "GPUs")
        return replace(require_context_limit(value), source=shown_path(source))
    if key == "kv-dtype":
        if not isinstance(value, str):
            raise ValueError("expected a dtype name such as \"float16\" or \"float8e4m3fn\"")
        return check_kv_dtype(value)
    if key == "weight-dtype":
        if not isinstance(value, str):
            raise ValueError("expected a dtype name such as \"bfloat16\", \"int4\" or \"q4_k_m\"")
        check_weight_dtype(value)
        return value
    if key == "fail-on":
        return _codes(value, severities=True)
    if key == "ignore":
        return _codes(value)
    if key in ("exit-zero", "decoder"):
        if not isinstance(value, bool):
            raise ValueError("expected true or false")
        return value
    if key == "format":
        if not isinstance(value, str) or formats is not None and value.strip().lower() not in formats:
            raise ValueError("expected one of " + ", ".join(formats or ()))
        return value.strip().lower()
    if key == "heads":
        return _heads(value)
    raise ValueError("unknown key; known keys: " + ", ".join(KEYS))


def settings_from_table(table: Mapping[str, object], source: str, formats: Collection[str] | None) -> Settings:
    """Validate a ``[tool.mhainspect]`` table; ``formats`` are the accepted ``format`` values (None:
    the format is not this reader's concern, as for the Python API, which renders nothing)."""
    values: dict[str, object] = {}
    for key, value in table.items():
        try:
            values[key] = _value(key, value, formats, source)
        except ValueError as exc:
            raise ConfigError(f"{source} [tool.mhainspect] {key}: {exc}") from None

    def get(key: str, kind: type[T]) -> T | None:
        value = values.get(key)
        return value if isinstance(value, kind) else None

    return Settings(
        max_params=get("max-params", Limit),
        max_attention_params=get("max-attention-params", Limit),
        fail_on=get("fail-on", frozenset),
        ignore=get("ignore", frozenset),
        exit_zero=get("exit-zero", bool),
        format=get("format", str),
        heads=get("heads", tuple),
        max_weight_bytes=get("max-weight-bytes", Limit),
        max_kv_cache=get("max-kv-cache", Limit),
        context=get("context", int),
        batch=get("batch", int),
        kv_dtype=get("kv-dtype", str),
        weight_dtype=get("weight-dtype", str),
        decoder=get("decoder", bool),
        gpu_memory=get("gpu-memory", int),
        gpus=get("gpus", int),
        require_context=get("require-context", Limit),
    )


def _read_toml(path: Path) -> dict[str, object]:
    # The TOML parser is imported when a pyproject.toml is found: most runs meet none.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10 installs tomli (see pyproject.toml)
        import tomli as tomllib

    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(read_failure(path, exc, directory="is a directory, not a config file")) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def _tool_table(path: Path, data: Mapping[str, object]) -> Mapping[str, object] | None:
    tool = data.get("tool")
    table = tool.get("mhainspect") if isinstance(tool, dict) else None
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.mhainspect] must be a table")
    return table


def find_config(start: Path) -> tuple[Path, Mapping[str, object]] | None:
    """The nearest pyproject.toml at or above ``start`` with a [tool.mhainspect] table."""
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if not candidate.is_file():
            continue
        table = _tool_table(candidate, _read_toml(candidate))
        if table is None:
            continue
        return candidate, table
    return None


def load_config_file(path: Path, formats: Collection[str] | None) -> Settings:
    """``--config FILE``: a pyproject.toml's [tool.mhainspect] table, or the top level of any other
    TOML file (an ``mhainspect.toml``); a pyproject.toml without the table is an error."""
    data = _read_toml(path)
    table = _tool_table(path, data)
    if table is None:
        if path.name == "pyproject.toml":
            raise ConfigError(f"{path}: has no [tool.mhainspect] table")
        table = data
    return settings_from_table(table, str(path), formats)


class ConfigFinder:
    """The settings that apply to each model: the nearest config above the model's own folder
    (looked up once per folder), one fixed file (--config), or none (--isolated)."""

    def __init__(self, formats: Collection[str] | None, *, config_file: Path | None = None,
                 isolated: bool = False) -> None:
        self.formats = formats
        self.isolated = isolated
        self.fixed: tuple[Settings, Path] | None = None
        if config_file is not None:
            self.fixed = load_config_file(config_file, formats), config_file
        self._by_folder: dict[Path, tuple[Settings, Path | None]] = {}

    def for_folder(self, folder: Path) -> tuple[Settings, Path | None]:
        """Settings for a model in ``folder`` and the file they came from (None: defaults)."""
        if self.fixed is not None:
            return self.fixed
        if self.isolated:
            return Settings(), None
        key = folder.resolve()
        if key not in self._by_folder:
            self._by_folder[key] = load_settings(key, self.formats)
        return self._by_folder[key]

    def for_model(self, model: Path | str) -> tuple[Settings, Path | None]:
        """A file's or model folder's own folder; a factory spec (no such path) and a remote model use
        the working directory."""
        if not isinstance(model, Path):
            return self.for_folder(Path.cwd())
        if model.is_dir():
            return self.for_folder(model)
        if model.exists() or model.parent.is_dir() and str(model.parent) not in ("", "."):
            return self.for_folder(model.parent)
        return self.for_folder(Path.cwd())


def load_settings(start: Path, formats: Collection[str] | None) -> tuple[Settings, Path | None]:
    """Settings from the nearest config (empty Settings when there is none) and its path."""
    found = find_config(start.resolve())
    if found is None:
        return Settings(), None
    path, table = found
    return settings_from_table(table, str(path), formats), path
