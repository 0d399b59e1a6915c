"""Inf output: an Inf difference can slip through checks that only look for NaN or use relative errors Inf/Inf."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>

extern "C" void fill_bad(float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = INFINITY;
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        self.lib.fill_bad(out, out.numel())
        return out
