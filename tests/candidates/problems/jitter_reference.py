"""A reference whose result moves in the last bits from call to call, as cuDNN's algorithm choice or atomics make
ConvTranspose3d's (KernelBench level 2): two runs on the same inputs differ, well within the tolerance."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tanh(x) + (self.calls % 3) * 1e-6


batch_size = 16
features = 64


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return []
