"""Constant output: a kernel that returns the same value whatever the input (passes on degenerate problems such as
the mean of a softmax, or with loose absolute tolerances)."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cstdint>

extern "C" void fill_const(float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = 0.5f;
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        self.lib.fill_const(out, out.numel())
        return out
