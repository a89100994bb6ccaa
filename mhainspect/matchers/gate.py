"""An output gate's own projection beside a block (gated attention: the attention's result times
sigmoid(x W) before O; AFMoE's, Muse-Glimmer's and HunYuan-V4's ``gate_proj``, Dory's and Laguna's
``g_proj``, NeoMME's beside O in ``output_projection``).

A projection held by the attention module and named as a gate (``grouping.gate_named``) is the
block's output gate when its widths say so: it reads the block's input (d_model) and writes either
O's input width (one gate per value: h·d_v) or one gate per head (h). It makes what O projects, so
it counts in the block's total (``params.gate``), as a gate packed into Q's projection does under Q
(Qwen3-Next's ``q_proj``: the weights alone do not show where Q ends, so it is not split). A
gate-named projection of other widths is not taken. Pure: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from mhainspect.matchers.grouping import RoleWeights, linear_dims
from mhainspect.results import Evidence, EvidenceSource


def output_gate(gates: Sequence[RoleWeights], d_model: int | None, o_in: int | None, heads: int | None
                ) -> tuple[int, tuple[Evidence, ...], str | None]:
    """(the parameters, the evidence, the module) of the block's output gate: the one candidate whose
    widths fit a block whose input is ``d_model`` wide and whose O reads ``o_in`` values of ``heads``
    heads; (0, (), None) when none or more than one fits."""
    fits: list[tuple[RoleWeights, int, str]] = []
    for rw in gates:
        dims = linear_dims(rw.weight, rw.module)
        if dims is None or d_model is None or dims[0] != d_model:
            continue
        if o_in is not None and dims[1] == o_in:
            fits.append((rw, dims[1], f"O's input width {o_in}: one gate per value"))
        elif heads is not None and dims[1] == heads:
            fits.append((rw, dims[1], f"the {heads} heads: one gate per head"))
    if len(fits) != 1:
        return 0, (), None
    rw, width, why = fits[0]
    params = rw.weight.numel + (rw.bias.numel if rw.bias is not None else 0)
    return params, (Evidence("gate", params, EvidenceSource.WEIGHT_SHAPE,
                             f"{rw.module} {list(rw.weight.shape)}: an output gate from the block's input ({d_model}) "
                             f"to {width} ({why}), in the total"),), rw.module
