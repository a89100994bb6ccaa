"""What an audit finds, as data: the closed vocabularies, blocks with their evidence, flags, misses
and the Report; in ``stages``, what one stage hands the next (SourceResult, SizeInputs, ...). The
lowest layer: it imports nothing else of the package but the lazy-export helper (``mhainspect.lazy``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mhainspect.lazy import lazy_exports
from mhainspect.results.blocks import (
    VERIFY_STATUSES,
    AttentionBlock,
    CacheFactors,
    Evidence,
    Flag,
    KVCache,
    MemoryAtContext,
    Miss,
    ParamBreakdown,
    Projection,
    WhatIf,
    projection_tensor_names,
)
from mhainspect.results.report import (
    SCHEMA_VERSION,
    FailedInput,
    ModelFacts,
    ModelSummary,
    Report,
    Reports,
    attention_params,
    contradicted,
)
from mhainspect.results.vocabulary import (
    _SOURCES,
    BlockKind,
    CacheStatus,
    EvidenceSource,
    FitStatus,
    Matcher,
    MixerKind,
    ReportWarning,
    Severity,
    VerifyStatus,
    Vocabulary,
    WarningCode,
    coded,
    warning_code,
)

__all__ = ['AttentionBlock', 'BlockKind', 'BlockVerification', 'CacheFactors', 'CacheStatus', 'Evidence', 'EvidenceSource', 'FailedInput', 'FitStatus', 'Flag', 'GpuFit', 'KVCache', 'LatentKV', 'Matcher', 'MemoryAtContext', 'Miss', 'Mixer', 'MixerKind', 'MixtureOfExperts', 'ModelFacts', 'ModelSummary', 'ParamBreakdown', 'Projection', 'Report', 'ReportWarning', 'Reports', 'SCHEMA_VERSION', 'Severity', 'SparseIndexer', 'VERIFY_STATUSES', 'VerifyStatus', 'Vocabulary', 'WarningCode', 'WeightDtypeWhatIf', 'WhatIf', '_SOURCES', 'attention_params', 'coded', 'projection_tensor_names', 'contradicted', 'warning_code']

if TYPE_CHECKING:
    from mhainspect.results.optional import (
        BlockVerification,
        GpuFit,
        LatentKV,
        Mixer,
        MixtureOfExperts,
        SparseIndexer,
        WeightDtypeWhatIf,
    )

# Report parts only an option or a rarer model adds (results/optional.py): loaded when first asked for.
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(
    ("BlockVerification", "GpuFit", "LatentKV", "Mixer", "MixtureOfExperts", "SparseIndexer", "WeightDtypeWhatIf"),
    "mhainspect.results.optional"), globals())
