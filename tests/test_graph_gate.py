"""An output gate in an exported graph (gated attention: the attention's result times Sigmoid(x W)
before O). The walk from the result to O passed a mask but not a gate: the block lost its O
(MHA008) and the gate's weights; now the walk passes the Mul and the gate counts (``params.gate``)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from mhainspect.pipeline import audit  # noqa: E402

D, H, DK = 64, 4, 16


class GatedAttention(torch.nn.Module):
    def __init__(self, per_head: bool, bias: bool) -> None:
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(D, H * DK, bias=False) for _ in range(3))
        self.o = torch.nn.Linear(H * DK, D, bias=False)
        self.per_head = per_head
        self.gate_proj = torch.nn.Linear(D, H if per_head else H * DK, bias=bias)
        with torch.no_grad():
            for p in self.parameters():
                p.add_(torch.randn_like(p) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (m(x).view(b, n, H, DK).transpose(1, 2) for m in (self.q, self.k, self.v))
        out = ((q @ k.transpose(-1, -2) / DK ** 0.5).softmax(-1) @ v).transpose(1, 2)
        gate = torch.sigmoid(self.gate_proj(x))
        out = out * (gate.unsqueeze(-1) if self.per_head else gate.view(b, n, H, DK))
        return self.o(out.reshape(b, n, H * DK))


@pytest.mark.parametrize(("per_head", "bias"), [(False, False), (True, False), (False, True)])
def test_an_exported_output_gate_is_its_blocks(per_head: bool, bias: bool, tmp_path: Path) -> None:
    module = GatedAttention(per_head, bias).eval()
    path = tmp_path / "gated.onnx"
    torch.onnx.export(module, (torch.randn(1, 8, D),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    report = audit(path)
    (block,) = report.blocks
    assert (block.num_heads, block.d_k) == (H, DK)
    assert [p.role for p in block.projections] == ["q", "k", "v", "o"]
    assert block.params.gate == sum(p.numel() for p in module.gate_proj.parameters())
    assert block.params.total == sum(p.numel() for p in module.parameters()) == report.model.total_params
    assert "MHA008" not in {f.code for f in report.flags}
