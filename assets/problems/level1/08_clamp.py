"""Clamp every element of a large 2-D tensor to [min_val, max_val] (constructor arguments).

Memory-bound elementwise operator. The bounds cut off a sizeable fraction of a standard normal
input on both sides, so both branches matter.
GPU size: 16384x32768 fp32 (2 GiB in, 2 GiB out).
"""
import torch
import torch.nn as nn

batch_size = 16384
dim = 32768
min_val = -0.5
max_val = 0.75

CPU_SIZES = {"batch_size": 2560, "dim": 4096}


class Model(nn.Module):
    """out = min(max(x, min_val), max_val)."""

    def __init__(self, min_val: float, max_val: float):
        super().__init__()
        self.min_val = min_val
        self.max_val = max_val

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=self.min_val, max=self.max_val)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [min_val, max_val]
