"""Only the first output checked: harnesses that compare `out[0]` (or the first tensor of a tuple) accept a
candidate whose other outputs are garbage. Here the second output is left as zeros."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cstdint>

extern "C" void scale(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = 2.0f * x[i];
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor):
        x = x.contiguous()
        scaled = torch.empty_like(x)
        self.lib.scale(x, scaled, x.numel())
        return scaled, torch.zeros(x.shape[0])
