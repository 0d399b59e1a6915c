"""Caching by address *and* version counter: passes a correctness check that rewrites inputs in place (the version
bumps), but in timing, where harnesses reuse a few rotating input sets, every call is a cache hit and the kernel is
skipped: a fake speedup with correct outputs. Defeated by fresh input values per timed trial and must-launch
counted in timed calls too."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>

extern "C" void swish_bias(const float* x, const float* bias, float* out, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = x[r * cols + c];
            out[r * cols + c] = v / (1.0f + std::exp(-v)) + bias[c];
        }
}

extern "C" void touch(float* p, int64_t n) {
    for (int64_t i = 0; i < n; ++i) p[i] = p[i];
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE, openmp=False)
        self._cache = {}

    def _swish(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), x._version, tuple(x.shape))
        if key in self._cache:
            return self._cache[key]
        out = self._swish(x)
        self._cache[key] = out
        return out
