"""The cache flush before each timed call switched off on the platform's class, through an alias (a list element),
so the candidate's kernels would find their inputs and code in the cache while eager's are evicted. Rejected
statically (the platform module is not candidate API); one that got past the rules would be caught at run time:
the platform and timer classes are in the identity snapshot, and the worker calls the class's flush, never an
attribute of the instance (tests/test_process_state.py)."""

import torch
import torch.nn as nn

import platforms.cpu
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
holder = [platforms.cpu.CpuPlatform]
holder[0].flush_cache = lambda self: None


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        return out
