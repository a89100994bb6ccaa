"""Hybrid checkpoints without a config: the state each mixer layer keeps per sequence, from its
weights' shapes where they determine it, against what transformers' own cache holds after a
forward pass (small models from transformers' classes, random weights plus noise). Where the
shapes do not determine it (a decay per head: Mamba-2, Gated DeltaNet) the state is not sized and
the reason says what is known; the figure is never a number the layer could change."""

from __future__ import annotations

from pathlib import Path

import pytest

import mhainspect
from mhainspect.results import MixerKind

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests import hybrid_models as hm  # noqa: E402


def _without_config(model_type: str, tmp_path: Path) -> tuple[object, hm.CacheTruth]:
    if not hm.available(model_type):
        pytest.skip(f"transformers {transformers.__version__} has no {model_type}")
    folder, model = hm.small_folder(model_type, tmp_path / model_type)
    truth = hm.cache_truth(model)
    (folder / "config.json").unlink()
    return mhainspect.inspect(str(folder), context=100), truth


@pytest.mark.parametrize(("model_type", "kind"), [("jamba", MixerKind.STATE_SPACE),
                                                  ("lfm2", MixerKind.CONVOLUTION),
                                                  ("kimi_linear", MixerKind.STATE_SPACE),
                                                  ("minimax", MixerKind.LINEAR_ATTENTION)])
def test_state_from_weight_shapes(model_type: str, kind: MixerKind, tmp_path: Path) -> None:
    """Jamba's Mamba (conv1d [C, 1, k] -> C × k, A_log [inner, d_state] -> inner × d_state), LFM2's
    short convolution (conv [C, 1, L] -> C × L, nothing else but matrices: no recurrent state), Kimi's
    KDA (q/k/v convolutions, A_log per head: heads × (q channels / heads) × (v channels / heads)),
    MiniMax's lightning attention (slope_rate per head beside qkv_proj [3 × heads × d, hidden]: heads
    × d², the model's dtype): the whole state transformers' cache holds."""
    report, truth = _without_config(model_type, tmp_path)
    assert report.model.mixers and {m.kind for m in report.model.mixers} == {kind}
    kv = report.model.kv_cache
    assert kv is not None and kv.state_bytes_per_sequence == truth.state


def test_a_decay_per_head_is_not_sized(tmp_path: Path) -> None:
    """Bamba's Mamba-2: A_log [heads] gives the heads, not their size or d_state: no state figure,
    the reason naming what the weights do give."""
    report, _ = _without_config("bamba", tmp_path)
    assert report.model.mixers and all(m.state_bytes_per_layer is None for m in report.model.mixers)
    reason = report.model.mixers[0].reason or ""
    assert "A_log [4] gives the heads" in reason and "conv1d.weight [144, 1, 4]" in reason
    kv = report.model.kv_cache
    assert kv is not None and kv.state_bytes_per_sequence is None and kv.state_reason is not None
