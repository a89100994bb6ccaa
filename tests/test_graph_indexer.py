"""A sparse-attention indexer in an exported graph (DeepSeek-V3.2 style: its own Q and K
projections score the keys, a ``TopK`` of those scores chooses the ones the attention reads,
scattered into a mask added to the scores). The graph shows no module: the indexer is what stands
behind the TopK back to the block's input, its weights none of the block's (``matchers.indexer``)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from mhainspect.pipeline import audit  # noqa: E402

D, H, DK, IH, IK, TOPK = 64, 4, 16, 2, 8, 4


class IndexedAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(D, H * DK, bias=False) for _ in range(4))
        self.o = torch.nn.Linear(H * DK, D, bias=False)
        self.wq = torch.nn.Linear(D, IH * IK, bias=False)  # the indexer's query, its own heads
        self.wk = torch.nn.Linear(D, IK, bias=False)  # its one key per token
        self.k_norm = torch.nn.LayerNorm(IK)
        self.weights = torch.nn.Linear(D, IH, bias=False)  # a weight per indexer head
        with torch.no_grad():
            for p in self.parameters():
                p.add_(torch.randn_like(p) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, H, DK).transpose(1, 2)
        k = self.k(x).view(b, n, H, DK).transpose(1, 2)
        v = self.v(x).view(b, n, H, DK).transpose(1, 2)
        iq = self.wq(x).view(b, n, IH, IK).transpose(1, 2)
        ik = self.k_norm(self.wk(x)).unsqueeze(1)
        index = (torch.relu(iq @ ik.transpose(-1, -2)) * self.weights(x).transpose(1, 2).unsqueeze(-1)).sum(1)
        chosen = index.topk(TOPK, dim=-1).indices
        mask = torch.full_like(index, float("-inf")).scatter(-1, chosen, 0.0).unsqueeze(1)
        scores = q @ k.transpose(-1, -2) / DK ** 0.5 + mask
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, H * DK)
        return self.o(out)


def test_an_exported_indexer_is_its_blocks(tmp_path: Path) -> None:
    module = IndexedAttention().eval()
    path = tmp_path / "indexed.onnx"
    torch.onnx.export(module, (torch.randn(1, 8, D),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    report = audit(path)
    (block,) = report.blocks
    indexer = sum(p.numel() for m in (module.wq, module.wk, module.k_norm, module.weights) for p in m.parameters())
    assert (block.num_heads, block.d_k) == (H, DK)
    assert block.params.indexer == indexer
    assert block.params.total == sum(p.numel() for p in module.parameters()) == report.model.total_params
    assert block.indexer is not None and (block.indexer.d_k, block.indexer.num_heads) == (IK, IH)
    assert not [w for w in report.warnings if "below" in str(w)]


def test_a_graph_without_a_topk_before_its_scores_has_no_indexer(tmp_path: Path) -> None:
    """A TopK elsewhere in the graph (over the output) is no indexer of the block."""
    class Plain(IndexedAttention):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, n, _ = x.shape
            q = self.q(x).view(b, n, H, DK).transpose(1, 2)
            k = self.k(x).view(b, n, H, DK).transpose(1, 2)
            v = self.v(x).view(b, n, H, DK).transpose(1, 2)
            out = ((q @ k.transpose(-1, -2) / DK ** 0.5).softmax(-1) @ v).transpose(1, 2).reshape(b, n, H * DK)
            y = self.o(out)
            return y.topk(2, dim=-1).values + self.wq(x).sum(-1, keepdim=True)

    path = tmp_path / "plain.onnx"
    torch.onnx.export(Plain().eval(), (torch.randn(1, 8, D),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    (block,) = audit(path).blocks
    assert block.params.indexer == 0 and block.indexer is None
