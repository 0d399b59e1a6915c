"""Warm-up detection, must-launch flavour: the kernel runs for the first calls (the correctness checks), then
ModelNew switches to plain PyTorch (right answers, no custom kernel) once timing starts. must-launch is
enforced on every warm-up and timed call too."""

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
        self.calls += 1
        if self.calls > 6:
            return x * torch.sigmoid(x) + self.bias
        return self._swish(x)
