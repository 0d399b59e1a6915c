"""Swish in half precision: judged by the half tolerance, not the fp32 one."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


n = 8192


def get_inputs():
    return [torch.randn(n, dtype=torch.float16)]


def get_init_inputs():
    return []
