"""The same expression in another order, (x - 1) + 1 - x: zero in exact arithmetic, other rounding noise in fp32."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cstdint>

extern "C" void noise(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        volatile float t = x[i] - 1.0f;  // volatile: the compiler may not fold the expression to 0
        out[i] = (t + 1.0f) - x[i];
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.noise(x, out, x.numel())
        return out
