"""Command injection through compiler flags: `-wrapper` makes g++ run an arbitrary program (here a shell) while
the harness compiles in trusted mode. Compiler flags are allow-listed."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>

extern "C" void swish_bias(const float* x, const float* bias, float* out, int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows * cols; ++i) {
        float v = x[i];
        out[i] = v / (1.0f + std::exp(-v)) + bias[i % cols];
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE, openmp=False, extra_cflags=("-wrapper", "/bin/sh,-c,env>leaked.txt;exec \"$0\" \"$@\""))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        return out
