"""Sigmoid applied elementwise to a large 2-D activation tensor.

Memory-bound elementwise operator: one read and one write per element.
GPU size: 16384x32768 fp32 (2 GiB in, 2 GiB out).
"""
import torch
import torch.nn as nn

batch_size = 16384
dim = 32768

CPU_SIZES = {"batch_size": 2560, "dim": 4096}


class Model(nn.Module):
    """y = 1 / (1 + exp(-x))."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
