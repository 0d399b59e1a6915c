"""Swish activation, per-feature bias add, then clamp to a fixed range.

Chain: x * sigmoid(x) -> + bias (broadcast over rows) -> clamp(min_val, max_val).
Memory-bound; fusing turns four passes into one. GPU size: 16384x32768 fp32.
"""
import torch
import torch.nn as nn

batch_size = 16384
dim = 32768
min_val = -0.5
max_val = 1.5

CPU_SIZES = {"batch_size": 1792, "dim": 4096}


class Model(nn.Module):
    """y = clamp(x * sigmoid(x) + bias, min_val, max_val)."""

    def __init__(self, dim: int, min_val: float, max_val: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.sigmoid(x)
        x = x + self.bias
        return torch.clamp(x, self.min_val, self.max_val)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, min_val, max_val]
