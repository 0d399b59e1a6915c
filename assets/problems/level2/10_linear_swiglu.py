"""Fused gate/up projection followed by SwiGLU: split the output in two halves, silu(gate) * up.

Chain: linear(x) to 2*hidden -> chunk -> silu(first half) -> * second half. The LLaMA MLP front
half. About 1.1 TFLOP at the GPU size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
in_features = 4096
hidden = 8192

CPU_SIZES = {"batch_size": 512, "in_features": 1024, "hidden": 1024}


class Model(nn.Module):
    """gate, up = linear(x).chunk(2, -1); y = silu(gate) * up."""

    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.gate_up = nn.Linear(in_features, 2 * hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden]
