"""tanh, one loop."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>

extern "C" void tanh_kernel(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(x[i]);
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.tanh_kernel(x, out, x.numel())
        return out
