"""Outputs that are fp32 rounding noise around zero (up to about 1e-7): (x + 1) - 1 - x. Zero in exact arithmetic;
each correct kernel's noise is its own, so every element is within atol while the relative L2 error is about 1."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 1.0) - 1.0 - x


batch_size = 16
features = 64


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return []
