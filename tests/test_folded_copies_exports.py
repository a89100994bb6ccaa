"""Models whose export stores a parameter a second time, under a view its constant folding made:
the audited total is the module's (tests/test_folded_copies.py has the views one by one).

- Swin (TorchScript): the relative-position bias table gathered by its constant index, [1, h, N, N];
- VITS's text encoder (dynamo, static shapes): its relative-position embeddings padded with zeros;
- SigLIP's vision tower (dynamo, static shapes): the position table gathered by the position_ids
  buffer, folded into one tensor the exporter says came from a parameter and a buffer;
- OPT and Starcoder2 with tied embeddings (TorchScript): the output projection a transposed copy of
  embed_tokens.weight.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch import nn  # noqa: E402

from mhainspect.pipeline import audit  # noqa: E402
from tests.conformance.zoo import VitsMultiHeadAttention, _eval, _hf_quiet, count_params  # noqa: E402

pytestmark = pytest.mark.slow


class _Outputs(nn.Module):
    """The model's outputs as a tuple of tensors (every output: no parameter is pruned), so both
    exporters take them."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any) -> Any:
        out = self.model(*args)
        if isinstance(out, torch.Tensor):
            return out
        return out if isinstance(out, tuple) else out.to_tuple()


class _VitsLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = VitsMultiHeadAttention(32, 32, 4, window_size=4)

    def forward(self, x: Any) -> Any:
        return self.attn(x, x)


def _hf(config_cls: str, model_cls: str, **cfg: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        _hf_quiet()
        torch.manual_seed(0)
        return _eval(getattr(transformers, model_cls)(getattr(transformers, config_cls)(**cfg)))

    return build


def _vits() -> nn.Module:
    torch.manual_seed(0)
    return _eval(_VitsLayer())


def _ids() -> tuple[Any, ...]:
    return torch.randint(0, 100, (1, 8)), torch.ones(1, 8, dtype=torch.long)


_DECODER = dict(vocab_size=100, num_hidden_layers=1, num_attention_heads=4, tie_word_embeddings=True,
                use_cache=False)
CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[Any, ...]], bool]] = {
    "swin-torchscript": (_hf("SwinConfig", "SwinModel", image_size=16, patch_size=2, embed_dim=8, depths=[2, 2],
                             num_heads=[2, 4], window_size=2, mlp_ratio=1.0),
                         lambda: (torch.randn(1, 3, 16, 16),), False),
    "vits-dynamo-static": (_vits, lambda: (torch.randn(1, 32, 7),), True),
    "siglip-dynamo-static": (_hf("SiglipVisionConfig", "SiglipVisionModel", hidden_size=32, intermediate_size=64,
                                 num_hidden_layers=1, num_attention_heads=4, image_size=16, patch_size=4),
                             lambda: (torch.randn(1, 3, 16, 16),), True),
    "opt-torchscript": (_hf("OPTConfig", "OPTForCausalLM", hidden_size=64, ffn_dim=128, word_embed_proj_dim=64,
                            max_position_embeddings=32, **_DECODER), _ids, False),
    "starcoder2-torchscript": (_hf("Starcoder2Config", "Starcoder2ForCausalLM", hidden_size=64, intermediate_size=128,
                                   num_key_value_heads=2, attn_implementation="eager", **_DECODER), _ids, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_total_is_the_modules(case: str, tmp_path: Path) -> None:
    build, inputs, dynamo = CASES[case]
    model = build()
    path = tmp_path / "model.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        if dynamo:
            program = torch.onnx.export(_Outputs(model), inputs(), None, dynamo=True, verbose=False,
                                        report=False, opset_version=18)
            program.save(str(path), external_data=False)
        else:
            torch.onnx.export(_Outputs(model), inputs(), str(path), dynamo=False, opset_version=17)
    report = audit(str(path))
    assert report.model.total_params == count_params(model)
    assert any("exporter-made copies of parameters" in w for w in report.warnings)
