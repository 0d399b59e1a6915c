import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cstdint>
extern "C" void relu(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0 ? x[i] : 0.0f
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = compile_cpp(SOURCE)

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.relu(x, out, x.numel())
        return out
