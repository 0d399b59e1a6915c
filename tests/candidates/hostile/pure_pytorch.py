"""Pure-framework "kernel": a ModelNew that just calls PyTorch (KernelBench leaderboard entries, 2024-25)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x) + self.bias
