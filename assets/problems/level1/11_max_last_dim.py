"""Max reduction over the last dimension of a large 2-D tensor (values only).

Memory-bound reduction: the whole input is read once; the output is one value per row.
GPU size: 32768x32768 fp32 (4 GiB read).
"""
import torch
import torch.nn as nn

batch_size = 32768
dim = 32768

CPU_SIZES = {"batch_size": 8192, "dim": 8192}


class Model(nn.Module):
    """out[i] = max_j x[i, j]."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
