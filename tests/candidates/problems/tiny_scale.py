"""Outputs far below fp32's atol (~1e-6): an all-zero output passes an absolute check, not a relative one."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1e-6


n = 4096


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
