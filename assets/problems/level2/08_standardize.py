"""Row standardization: subtract the row mean and divide by the row standard deviation (unbiased) plus eps.

Chain: mean -> subtract -> std (unbiased, Bessel-corrected) -> + eps -> divide. No affine
parameters. GPU size: 16384x32768 fp32 (2 GiB in, 2 GiB out).
"""
import torch
import torch.nn as nn

batch_size = 16384
dim = 32768
eps = 1e-5

CPU_SIZES = {"batch_size": 256, "dim": 8192}


class Model(nn.Module):
    """y = (x - mean(x, -1)) / (std(x, -1, unbiased) + eps)."""

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centered = x - x.mean(dim=-1, keepdim=True)
        std = x.std(dim=-1, keepdim=True)
        return centered / (std + self.eps)


def get_inputs():
    # Non-zero mean and non-unit scale per row so both steps matter.
    x = torch.randn(batch_size, dim)
    return [x * (1.0 + torch.rand(batch_size, 1)) + torch.randn(batch_size, 1)]


def get_init_inputs():
    return [eps]
