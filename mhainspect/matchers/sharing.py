"""A weight used by several blocks counts once: the one sharing rule of every front end."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from mhainspect.results import AttentionBlock, Evidence, EvidenceSource, ParamBreakdown, Projection


def count_shared_once(blocks: Sequence[AttentionBlock], identity: Callable[[str], str] | None = None,
                      is_copy: Callable[[str], bool] | None = None) -> list[AttentionBlock]:
    """A projection whose weight an earlier block also uses (layers sharing a K/V projection, a
    decoder tied to its encoder) counts there only: in the later block its weight and bias count 0,
    with evidence naming the block it counts in, so that block shares never add up past the model.
    As ``results.report.attention_params`` does, a bias alone is not identity: exporters store equal all-zero biases
    of different layers as one tensor.

    ``identity``: what makes two weight names one parameter (a weight list's
    ``ir.weights.parameter_identity``: shared storage, a tied copy's source); None: the name (a
    graph stores a weight once, under one name). ``is_copy``: the names that repeat another
    weight (a weight list's tied copies, ``ir.weights.WeightMeta.tied_to``): the first block using
    the weight under a name that is not a copy counts it, before any block using a copy; None:
    no name is. The one rule of every front end."""
    owner: dict[tuple[str, str], tuple[bool, str]] = {}  # (identity, role) -> (a copy's name, block)
    for b in blocks:
        for p in b.projections:
            if p.weight is not None:
                key = (p.weight if identity is None else identity(p.weight), p.role)
                copy = is_copy is not None and is_copy(p.weight)
                if key not in owner or (owner[key][0] and not copy):
                    owner[key] = copy, b.name
    out: list[AttentionBlock] = []
    for b in blocks:
        changed: list[Projection] = []
        notes: list[Evidence] = []
        for p in b.projections:
            if p.weight is None:
                first = b.name
            else:
                first = owner[(p.weight if identity is None else identity(p.weight), p.role)][1]
            if first != b.name and p.params:
                notes.append(Evidence(p.role, p.params, EvidenceSource.SAME_WEIGHTS,
                                      f"{p.role.upper()} projection {p.weight} is shared with {first}: counted there"))
                p = replace(p, weight_params=0, bias_params=0, norm_params=0, conv_params=0)
            changed.append(p)
        if notes:
            breakdown = ParamBreakdown.from_projections(changed, extra=b.params.extra, latent=b.params.latent,
                                                        kv_rows=b.params.kv_rows, indexer=b.params.indexer,
                                                        gate=b.params.gate)
            b = replace(b, projections=tuple(changed), params=breakdown, evidence=b.evidence + tuple(notes))
        out.append(b)
    return out
