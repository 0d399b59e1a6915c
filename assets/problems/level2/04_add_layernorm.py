"""Residual add followed by LayerNorm (post-norm transformer sub-layer output).

Chain: x + residual -> LayerNorm(hidden, affine). Fusing avoids writing and re-reading the sum.
GPU size: two 32x4096x4096 fp32 inputs (2 GiB each) and one output.
"""
import torch
import torch.nn as nn

batch_size = 32
seq_len = 4096
hidden = 4096

CPU_SIZES = {"batch_size": 16, "seq_len": 512, "hidden": 1024}


class Model(nn.Module):
    """y = layer_norm(x + residual)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(hidden))
            self.norm.bias.add_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden), torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
