"""Leaking global torch state out of forward: `torch.autocast` entered inside a generator that is left suspended
stays enabled after forward returns, so the harness's later reference runs use reduced precision (the CPU
analogue of TF32 drift). torch.autocast itself is a legitimate API; leaving it on is not."""

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
"""
HELD = []


def _hold_autocast():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        if not HELD:
            gen = _hold_autocast()
            next(gen)
            HELD.append(gen)
        return out
