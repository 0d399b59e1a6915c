"""A C++ error on a known candidate line: the compile_error verdict must point at that line."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cstdint>

extern "C" void scale(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        out[i] = x[i] * undeclared_factor;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        self.lib.scale(x, out, x.numel())
        return out
