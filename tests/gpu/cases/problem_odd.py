"""Swish on a tensor whose size is not a multiple of any block size (1000 x 1001)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(1000, 1001)]


def get_init_inputs():
    return []
