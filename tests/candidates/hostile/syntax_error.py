"""A Python syntax error on a known line: the compile_error verdict must point at it."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor
        return x
