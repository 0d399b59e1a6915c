"""ReLU of a small matrix (a test problem: tiny, so evaluations are quick)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(32, 32)]


def get_init_inputs():
    return []
