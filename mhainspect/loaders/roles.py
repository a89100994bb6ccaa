"""Moved: name-based grouping is ``mhainspect.matchers.grouping``, ``WeightMeta`` is in
``mhainspect.static_ir``. Compatibility re-export for branches written against the old path;
nothing in mhainspect imports it (tests/test_layers.py lists it as the one allowed exception).
Remove once every branch is merged."""

from mhainspect.matchers.grouping import (  # noqa: F401
    CONV1D_NAMES,
    K_NAMES,
    O_NAMES,
    PACKED_NAMES,
    Q_NAMES,
    V_NAMES,
    GroupedBlock,
    RoleWeights,
    group_attention,
    kernel_head_split,
    linear_dims,
    natural_key,
    projection,
)
from mhainspect.static_ir import WeightMeta  # noqa: F401
