"""What every convention shares: the result types, argument checks, term and total building, and
the argument spec a convention declares (its names, kinds, defaults, aliases)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

ArgValue = int | bool | None
"""A resolved argument value."""


UserValue = str | int | bool | None
"""An argument value as a user may give it (strings are parsed)."""


@dataclass(frozen=True)
class Term:
    """One parameter tensor (or one role's share of a packed tensor).

    ``formula`` is symbolic in the framework's argument names, ``expanded`` the same product
    with numbers, ``tensor`` the framework's own parameter name. ``extra`` terms (T5's relative
    position bias table) are not projections and are not counted in ``Calculation.total``.
    """

    name: str
    formula: str
    value: int
    is_bias: bool
    expanded: str = ""
    tensor: str = ""
    extra: bool = False


@dataclass(frozen=True)
class Calculation:
    """The parameter count of one attention layer under one convention."""

    convention: str
    arguments: tuple[tuple[str, ArgValue], ...]
    terms: tuple[Term, ...]
    total: int  # projections (weights + biases); excludes ``extra``
    weights: int
    biases: int
    num_heads: int
    d_k: int
    d_v: int
    q_width: int  # total query/key projection width (all heads)
    v_width: int  # total value projection width (all heads)
    d_model: int  # width of the (query) input
    output_dim: int
    scales_with_heads: bool  # does the total change with the head count at the other args fixed?
    explanation: str
    notes: tuple[str, ...]
    extra: int = 0  # non-projection parameters (T5 relative attention bias), not in ``total``
    # Set by ``compare`` (and also in ``notes``): what it assumed for this convention, and the
    # notes that hold for the whole comparison (the same in every row).
    assumed: tuple[str, ...] = ()
    comparison_notes: tuple[str, ...] = ()
    # The arguments as the caller gave them (``arguments`` holds every value resolved, a derived
    # head_dim included): the same layer at another head count keeps these, and derives the rest
    # again (``registry.what_if``; the text's what-if table and the page's curve alike).
    given: tuple[tuple[str, UserValue], ...] = ()

    @property
    def what_if_arguments(self) -> dict[str, UserValue]:
        """What another head count keeps: the given arguments (all of them when none are recorded)."""
        return dict(self.given) if self.given else dict(self.arguments)

    def __str__(self) -> str:
        """``print(mhainspect.calc(...))``: the term-by-term breakdown ``mhainspect calc`` prints."""
        return _render_calc(self, "text")

    def __repr__(self) -> str:
        """One line (the dataclass repr is ~1,500 characters); the fields hold it all."""
        args = ", ".join(f"{name}={value}" for name, value in self.arguments)
        return f"<Calculation {self.convention}({args}): {self.total:,} params, {self.num_heads} heads × d_k {self.d_k}>"

    def _repr_html_(self) -> str | None:
        """Jupyter shows a calculation as ``calc -f html`` does: the formula, the bar, the curve."""
        return _render_calc(self, "html")

    def to_dict(self) -> dict[str, Any]:
        """``calc -f json``'s document as plain Python data."""
        data: dict[str, Any] = importlib.import_module("mhainspect.render").calc_to_dict(self)
        return data


class Comparison(tuple[tuple[str, "Calculation | str"], ...]):
    """``compare()``'s rows, (convention, calculation or why it cannot take the arguments): a tuple
    that prints as ``calc --compare`` and that Jupyter shows as its HTML page."""

    def __str__(self) -> str:
        return _render_calc(self, "text")

    def _repr_html_(self) -> str | None:
        return _render_calc(self, "html")

    def to_dict(self) -> list[dict[str, Any]]:
        """``calc --compare -f json``'s rows as plain Python data."""
        data: list[dict[str, Any]] = importlib.import_module("mhainspect.render").calc_to_dict(self)
        return data


def _render_calc(calculation: Calculation | Comparison, fmt: str) -> str:
    """``mhainspect.render.render_calc``, looked up when a calculation is printed or shown: the
    renderers sit above this package, so they are found by name at call time (nothing is attached
    at import)."""
    text: str = importlib.import_module("mhainspect.render").render_calc(calculation, fmt)
    return text


def positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def optional_positive(name: str, value: object) -> int | None:
    return None if value is None else positive(name, value)


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")  # noqa: TRY004
    return value


def thousands(value: int) -> str:
    return f"{value:,}"


def term(
    name: str,
    formula: str,
    factors: Sequence[int],
    *,
    is_bias: bool,
    tensor: str,
    extra: bool = False,
) -> Term:
    value = 1
    for factor in factors:
        value *= factor
    return Term(
        name=name,
        formula=formula,
        value=value,
        is_bias=is_bias,
        expanded=" × ".join(str(f) for f in factors),
        tensor=tensor,
        extra=extra,
    )


def build(
    *,
    convention: str,
    arguments: tuple[tuple[str, ArgValue], ...],
    terms: Sequence[Term],
    num_heads: int,
    d_k: int,
    d_v: int,
    q_width: int,
    v_width: int,
    d_model: int,
    output_dim: int,
    scales_with_heads: bool,
    explanation: str,
    notes: Sequence[str],
) -> Calculation:
    weights = sum(t.value for t in terms if not t.is_bias and not t.extra)
    biases = sum(t.value for t in terms if t.is_bias and not t.extra)
    extra = sum(t.value for t in terms if t.extra)
    return Calculation(
        convention=convention,
        arguments=arguments,
        terms=tuple(terms),
        total=weights + biases,
        weights=weights,
        biases=biases,
        num_heads=num_heads,
        d_k=d_k,
        d_v=d_v,
        q_width=q_width,
        v_width=v_width,
        d_model=d_model,
        output_dim=output_dim,
        scales_with_heads=scales_with_heads,
        explanation=explanation,
        notes=tuple(notes),
        extra=extra,
    )


def with_notes(calc: Calculation, notes: Sequence[str]) -> Calculation:
    if not notes:
        return calc
    return dataclasses.replace(calc, notes=calc.notes + tuple(notes))


Kind = Literal["int", "opt_int", "bool"]


@dataclass(frozen=True)
class Param:
    name: str
    kind: Kind
    required: bool = False
    default: ArgValue = None


@dataclass(frozen=True)
class Spec:
    params: tuple[Param, ...]
    heads: str
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # accepted, no effect on the parameter count


def spelling_key(name: str) -> str:
    """The key under which an argument name is matched (two names with one key are one argument):
    spelling-insensitive, as MATLAB users write numHeads and CLI users key-dim."""
    return name.replace("_", "").replace("-", "").lower()


@dataclass(frozen=True)
class Convention:
    """One framework's convention: its name (as ``calc`` takes it), the layer it describes, the
    function that counts it, the arguments it takes, and how it reads the arguments of ``compare``
    (its own arguments and what it assumed, or why it cannot take them)."""

    name: str
    layer_name: str
    count: Callable[..., Calculation]
    spec: Spec
    for_compare: Callable[[Mapping[str, ArgValue], int, int], tuple[dict[str, ArgValue], list[str]] | str]
