"""Scaled multiply-add (axpy): out = alpha * x + y with a Python-scalar alpha.

Memory-bound: two reads and one write per element. alpha is passed as a Python float in
get_inputs(), not as a tensor.
GPU size: two 16384x24576 fp32 inputs (1.5 GiB each) and one output.
"""
import torch
import torch.nn as nn

batch_size = 16384
dim = 24576
alpha = 0.75

CPU_SIZES = {"batch_size": 2048, "dim": 4096}


class Model(nn.Module):
    """out = alpha * x + y."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
        return alpha * x + y


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim), alpha]


def get_init_inputs():
    return []
