"""Scalar (Python number) inputs next to a tensor: y = x * alpha + shift."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, alpha: float, shift: int) -> torch.Tensor:
        return x * alpha + shift


n = 4096


def get_inputs():
    return [torch.randn(n), 0.75, 3]


def get_init_inputs():
    return []
