"""Moved to ``mhainspect.matchers.static`` (beside the graph assembler and the shared field rules
in ``mhainspect.matchers.assembly``). Compatibility re-export for branches written against the
old path; remove once every branch is merged."""

from mhainspect.matchers.static import assemble  # noqa: F401
from mhainspect.static_ir import HeadOffers  # noqa: F401
