"""Sum reduction over the last dimension of a large 2-D tensor (keepdim=True).

Memory-bound reduction: the whole input is read once; the output is one value per row.
GPU size: 32768x32768 fp32 (4 GiB read).
"""
import torch
import torch.nn as nn

batch_size = 32768
dim = 32768

CPU_SIZES = {"batch_size": 8192, "dim": 8192}


class Model(nn.Module):
    """out[i, 0] = sum_j x[i, j]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=-1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
