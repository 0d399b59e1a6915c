"""Dropout with a mask of its own (a hash of the element's index): right in distribution, but not the reference's
random numbers, so it cannot match it element by element."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>

extern "C" void dropout_tanh2(const float* x, float* out, int64_t n, float p) {
    for (int64_t i = 0; i < n; ++i) {
        uint32_t h = (uint32_t)i * 2654435761u;
        h ^= h >> 16;
        float u = (float)(h & 0xffffff) / 16777216.0f;
        float kept = u < p ? 0.0f : x[i] / (1.0f - p);
        out[i] = std::tanh(kept * 2.0f);
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self, dropout_p: float):
        super().__init__()
        self.p = dropout_p
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.dropout_tanh2(x, out, x.numel(), self.p)
        return out
