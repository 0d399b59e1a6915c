"""Gated RMSNorm (Mamba-2 style): RMSNorm(x) * weight multiplied by SiLU(gate).

Chain: mean(x^2) -> rsqrt -> * x * weight -> * silu(gate). Two large inputs, one output.
GPU size: x and gate 32x4096x4096 fp32 (2 GiB each).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
seq_len = 4096
hidden = 4096
eps = 1e-6

CPU_SIZES = {"batch_size": 12, "seq_len": 512, "hidden": 1024}


class Model(nn.Module):
    """y = x * rsqrt(mean(x^2, -1) + eps) * weight * silu(gate)."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return normed * self.weight * F.silu(gate)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden), torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, eps]
