"""Graph-less paths (nn.Module recogniser, checkpoints, Hugging Face folders): regressions from QA.

- A packed multi-query [Q; K; V] weight without a config is split by the O projection's input
  width, never into even thirds (GPTBigCode ``c_attn`` [96, 64]: Q 64, K 16, V 16).
- DeBERTa v1's packed ``in_proj`` has no bias; its ``q_bias`` and ``v_bias`` vectors are the Q and
  V biases of the block.
Models are built from small configs with random weights; every number is exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mhainspect.matchers.assembly import split_packed
from mhainspect.results import AttentionBlock

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

import mhainspect  # noqa: E402
from mhainspect.pipeline import audit  # noqa: E402


def _counts(block: AttentionBlock) -> tuple[Any, ...]:
    p = block.params
    return block.num_heads, block.num_kv_heads, block.d_k, block.d_model, p.q, p.k, p.v, p.o, p.bias, p.total


def _bigcode() -> Any:
    torch.manual_seed(0)
    cfg = transformers.GPTBigCodeConfig(n_embd=64, n_head=4, n_layer=2, n_positions=32, vocab_size=128,
                                        n_inner=128, multi_query=True)
    return transformers.GPTBigCodeModel(cfg).eval()


def _deberta() -> Any:
    torch.manual_seed(0)
    cfg = transformers.DebertaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                     intermediate_size=128, vocab_size=128, max_position_embeddings=64,
                                     relative_attention=True, pos_att_type=["p2c", "c2p"],
                                     max_relative_positions=16, type_vocab_size=0)
    return transformers.DebertaModel(cfg).eval()


# Q 64·64 + 64, K and V 16·64 + 16 each (one KV head of 16), O 64·64 + 64.
BIGCODE_PARAMS = (4_160, 1_040, 1_040, 4_160, 160, 10_400)
# in_proj 192·64 without bias; q_bias and v_bias 64 each; output.dense 64·64 + 64.
DEBERTA_PARAMS = (4_160, 4_096, 4_160, 4_160, 192, 16_576)


def _saved(model: Any, path: Path, *, config: bool) -> Path:
    model.save_pretrained(path)
    if not config:  # the weights file alone (a folder needs its config.json)
        (path / "config.json").unlink()
        return path / "model.safetensors"
    return path


@pytest.mark.slow  # many seconds: a model exported or fuzzed (-m 'not slow' leaves it out)
def test_gpt_bigcode_module_and_folder(tmp_path: Path) -> None:
    model = _bigcode()
    module = mhainspect.inspect(model)
    folder = audit(_saved(model, tmp_path, config=True))
    for report in (module, folder):
        assert [b.name for b in report.blocks] == ["h.0.attn", "h.1.attn"]
        for b in report.blocks:
            assert _counts(b) == (4, 1, 16, 64, *BIGCODE_PARAMS)


def test_gpt_bigcode_without_config_is_split_by_the_output_width_not_in_thirds(tmp_path: Path) -> None:
    report = audit(_saved(_bigcode(), tmp_path, config=False))
    assert len(report.blocks) == 2
    for b in report.blocks:
        assert _counts(b) == (None, None, None, 64, *BIGCODE_PARAMS)
        split = next(e for e in b.evidence if e.field == "qkv_split")
        assert "split 64 + 16 + 16" in split.detail and "d_v = d_k" in split.detail
        assert b.unknown_reason and "config.json" in b.unknown_reason
    assert any(f.code == "MHA004" for f in report.flags)


def test_deberta_v1_q_bias_and_v_bias_module_and_folder(tmp_path: Path) -> None:
    model = _deberta()
    module = mhainspect.inspect(model)
    folder = audit(_saved(model, tmp_path, config=True))
    for report in (module, folder):
        assert [b.name for b in report.blocks] == ["encoder.layer.0.attention", "encoder.layer.1.attention"]
        for b in report.blocks:
            assert _counts(b) == (4, 4, 16, 64, *DEBERTA_PARAMS)
            biases = {p.role: p.bias for p in b.projections}
            assert biases["q"] is not None and biases["q"].endswith("self.q_bias")
            assert biases["v"] is not None and biases["v"].endswith("self.v_bias")
            assert biases["k"] is None
            assert b.weight_bytes == 16_576 * 4  # its own tensors, not the module's position projections


def test_deberta_v1_without_config(tmp_path: Path) -> None:
    report = audit(_saved(_deberta(), tmp_path, config=False))
    for b in report.blocks:
        # O's input width 64 fixes Q; K and V take 64 each; heads stay unknown.
        assert _counts(b) == (None, None, None, 64, *DEBERTA_PARAMS)


def test_packed_weight_nothing_splits_is_counted_once_under_q(tmp_path: Path) -> None:
    """No config and no O projection: the split is unknown, the weight counts once, heads unknown."""
    from safetensors.torch import save_file

    path = tmp_path / "qkv.safetensors"
    save_file({"layers.0.attn.qkv_proj.weight": torch.zeros(96, 64)}, str(path))
    (b,) = audit(path).blocks
    assert (b.params.q, b.params.k, b.params.v, b.params.total) == (96 * 64, 0, 0, 96 * 64)
    assert b.num_heads is None
    assert b.unknown_reason is not None and "counted whole under Q" in b.unknown_reason


@pytest.mark.parametrize(("args", "parts"), [
    ((96, None, None, None, None, 64), (64, 16, 16)),  # MQA: O gives Q, the rest halves (d_v = d_k)
    ((192, None, None, None, None, 64), (64, 64, 64)),  # MHA by the same rule, not by default
    ((96, 4, None, None, None, 64), (64, 16, 16)),  # heads known, kv heads not: O disagrees with thirds
    ((192, 4, None, None, None, None), (64, 64, 64)),  # heads known, no kv heads claim: MHA thirds
    ((96, 4, 1, 16, 16, None), (64, 16, 16)),
])
def test_split_packed(args: tuple[Any, ...], parts: tuple[int, int, int]) -> None:
    split = split_packed(*args)
    assert split is not None and split.parts == parts


@pytest.mark.parametrize("args", [
    (96, None, None, None, None, None),  # nothing gives Q's part: never thirds
    (96, None, None, None, None, 40),  # K, V 28 each would not divide Q's 40 (h is a multiple of g)
    (100, None, None, None, None, 64),  # K, V 18 each: same
    (96, None, None, None, None, 96),  # O as wide as the whole packed weight
    (96, 3, None, None, None, 64),  # 3 heads cannot share Q's 64
])
def test_split_packed_unknown(args: tuple[Any, ...]) -> None:
    assert split_packed(*args) is None
