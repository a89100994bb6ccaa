"""Parameter-count conventions of attention layers (the ``calc`` side).

Pure library: no printing, no I/O, no exit. Every function takes the framework's own argument
names so a user can paste what they wrote, and returns a :class:`Calculation` that says term by
term where the parameters are, what d_k / d_v the arguments imply, and whether the head count
changes the count when the other arguments stay as given.

One module per framework (pytorch, keras, matlab, huggingface, t5) holds its argument spec, its
formula and how it reads a ``compare``; common.py and roles.py hold what they share, registry.py
the table by name, compare.py and vs.py the two ways of setting counts side by side.

Formulas were checked against the real layers (tests/test_conventions.py): torch
``nn.MultiheadAttention``, Keras 3 ``MultiHeadAttention``, transformers ``LlamaAttention`` and
``T5Attention``; MATLAB ``selfAttentionLayer`` from its documented learnable shapes.
"""

from mhainspect.conventions.common import (
    ArgValue,
    Calculation,
    Comparison,
    Term,
    UserValue,
    spelling_key,
)
from mhainspect.conventions.compare import compare
from mhainspect.conventions.huggingface import hf
from mhainspect.conventions.keras import keras
from mhainspect.conventions.matlab import matlab
from mhainspect.conventions.pytorch import pytorch
from mhainspect.conventions.registry import (
    CONVENTIONS,
    LAYER_NAMES,
    calculate,
    heads_argument,
    kv_heads_of,
    kv_what_if,
    what_if,
)
from mhainspect.conventions.t5 import t5
from mhainspect.conventions.vs import VsChange, VsResult, vs

__all__ = [
    "CONVENTIONS",
    "LAYER_NAMES",
    "ArgValue",
    "Calculation",
    "Comparison",
    "Term",
    "UserValue",
    "VsChange",
    "VsResult",
    "calculate",
    "compare",
    "heads_argument",
    "hf",
    "keras",
    "kv_heads_of",
    "kv_what_if",
    "matlab",
    "pytorch",
    "spelling_key",
    "t5",
    "vs",
    "what_if",
]
