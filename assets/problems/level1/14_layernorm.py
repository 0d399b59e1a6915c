"""LayerNorm over the hidden dimension of a (batch, seq, hidden) activation, with affine weight and bias.

Row-wise mean and variance (biased), normalize, then scale and shift. The affine parameters are
perturbed away from their ones/zeros defaults at construction so that they matter.
GPU size: 32x4096x4096 fp32 (2 GiB in, 2 GiB out).
"""
import torch
import torch.nn as nn

batch_size = 32
seq_len = 4096
hidden = 4096
eps = 1e-5

CPU_SIZES = {"batch_size": 20, "seq_len": 512, "hidden": 1024}


class Model(nn.Module):
    """out = (x - mean) / sqrt(var + eps) * weight + bias over the last dim."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(hidden))
            self.norm.bias.add_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, eps]
