"""How the names of the weights only a recurrent or convolution token mixer holds end (the checkpoint
reader's evidence, ``frontends.checkpoint.mixers``), apart so that a graph reader can ask whether a
model has any without importing that reader. No imports: cheap at start-up."""

from __future__ import annotations

# Parameter names only a recurrent (linear attention, state-space) mixer holds: a state decay, a
# time-step bias, lightning attention's slope rates, RWKV's per-channel decay and current-token bonus
# of its WKV recurrence (``time_decay``, ``time_first``: its key/value/receptance projections are no
# softmax attention).
STATE_WEIGHTS = frozenset(("A_log", "dt_bias", "slope_rate", "time_decay", "time_first"))
# How the name of such a parameter, or of the weight of a mixer's short convolution, ends.
MIXER_ENDINGS = (*sorted(STATE_WEIGHTS), "conv.weight", "conv1d.weight", "conv_1d.weight")  # conv_1d: RecurrentGemma
# The longest kernel of a mixer's short causal convolution (Mamba: 4, LFM2: 3); a longer depthwise
# convolution is a model's own (a Conformer's 31, a positional convolution's 128).
MAX_CONV_KERNEL = 16
