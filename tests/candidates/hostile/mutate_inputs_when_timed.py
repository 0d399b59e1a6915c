"""Mutated inputs, only once timing starts: the checked calls (5 seeds and the in-place rewrite) leave their inputs
alone; every call after them zeroes its input after computing the answer. Each timed call's inputs are checked too,
in the candidate's own process where it runs in one (the judge never sees that copy)."""

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
        self.calls = 0


    def _swish(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._swish(x)
        self.calls += 1
        if self.calls > 6:
            x.zero_()
        return out
