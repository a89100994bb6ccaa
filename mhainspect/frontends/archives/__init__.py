"""Readers of PyTorch archives that run nothing from the file: torch.export programs (.pt2) and TorchScript archives."""
