"""Dropout in training mode, as KernelBench's level-2 Matmul_Dropout_Softmax leaves it (nn.Module's default mode):
the reference draws random numbers on every call."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dropout_p: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dropout(x) * 2.0)


batch_size = 16
features = 64
dropout_p = 0.3


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [dropout_p]
