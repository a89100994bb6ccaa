"""MODEL arguments as the faces (the CLI, the Python API, the batch runner) hand them to a run.

The faces never reach a front end or a transport themselves (an import-linter contract): what they
need to know of their arguments before a run (the models a folder names, whether a document holds
several models, the keyword arguments of a factory spec, a --timeout) is asked here.

- ``model_argument``: one argument as a ModelRef (a Path, or a remote reference kept as text);
- ``expand``: arguments -> the models they name (a folder of models: every model below it; a
  Hugging Face folder: one model; a remote repo: its models), listed within one deadline;
- ``factory_args``: --arg KEY=VALUE pairs as a factory's keyword arguments, checked against the
  sources they are for;
- ``parse_timeout``: a --timeout value.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mhainspect.errors import InputError
from mhainspect.frontends.folders import ModelRef, expand_models, model_argument

__all__ = ["Expansion", "ModelRef", "expand", "factory_args", "model_argument", "parse_timeout"]


@dataclass(frozen=True)
class Expansion:
    """Arguments and the models they name, in order (a model reached twice kept once)."""

    arguments: tuple[ModelRef, ...]
    models: tuple[ModelRef, ...]

    @property
    def sources(self) -> tuple[str, ...]:
        """The models as a request's sources."""
        return tuple(str(m) for m in self.models)

    @property
    def several(self) -> bool:
        """A multi-model document: several models, or a folder of models (a Hugging Face model
        folder is one model, not a folder of them; a remote folder of models expands to other
        references)."""
        from mhainspect.frontends.kinds import is_model_folder

        models, arguments = self.models, self.arguments
        return len(models) > 1 or len(arguments) > 1 or any(
            m not in models if isinstance(m, str) else m.is_dir() and not is_model_folder(m) for m in arguments)


def expand(texts: Iterable[str | os.PathLike[str]], *, timeout: float | None = None) -> Expansion:
    """The models ``texts`` name; a remote folder is listed now, within ``timeout`` seconds (None:
    the deadline in force, else the default). InputError for an argument that names none."""
    from mhainspect.sources.deadline import model_deadline

    with model_deadline(timeout):
        arguments = tuple(model_argument(t) for t in texts)
        return Expansion(arguments, expand_models(arguments))


def factory_args(pairs: Sequence[str], sources: Sequence[str]) -> dict[str, Any]:
    """--arg ``key=value`` pairs as keyword arguments (Python literals where they parse, else
    strings); InputError for a bad or repeated key, or when none of ``sources`` is a factory spec
    (``pkg.module:function``, ``file.py:function``), which alone take them."""
    if not pairs:
        return {}
    from mhainspect.frontends.dispatch import classify, parse_factory_args  # only a run given --arg
    from mhainspect.frontends.formats import Kind

    args = parse_factory_args(pairs)
    if args and not any(classify(s).kind is Kind.FACTORY for s in sources):
        raise InputError("--arg applies to factory specs (module:function or file.py:function); "
                         "none of the models is one")
    return args


def parse_timeout(raw: str) -> float:
    """A --timeout value: positive, finite seconds (ValueError otherwise)."""
    from mhainspect.sources.deadline import parse_timeout as parse

    return parse(raw)
