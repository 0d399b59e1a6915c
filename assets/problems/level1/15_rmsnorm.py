"""RMSNorm over the hidden dimension (LLaMA style), written out in torch ops with a learned scale.

out = x * rsqrt(mean(x^2, dim=-1) + eps) * weight. No mean subtraction, no bias.
GPU size: 32x4096x4096 fp32 (2 GiB in, 2 GiB out).
"""
import torch
import torch.nn as nn

batch_size = 32
seq_len = 4096
hidden = 4096
eps = 1e-6

CPU_SIZES = {"batch_size": 14, "seq_len": 512, "hidden": 1024}


class Model(nn.Module):
    """Root-mean-square normalization with a per-feature weight."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms_inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms_inv * self.weight


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, eps]
