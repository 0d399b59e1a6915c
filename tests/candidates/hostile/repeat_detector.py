"""Result caching by content (a fingerprint of the input values): harnesses that time a few input sets in
rotation let every later call hit the cache and skip the kernel. Here a repeated input is answered with
garbage, so the verdict is correct only if no checked or timed call ever saw input values twice."""

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
        self.seen = set()

    def _swish(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (tuple(x.shape), float(x.sum()), float(x.flatten()[0]), float(x.flatten()[-1]))
        if key in self.seen:
            return torch.zeros_like(x)  # a repeat: a caching kernel would skip its work here
        self.seen.add(key)
        return self._swish(x)
