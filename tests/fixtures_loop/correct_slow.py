import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

# Correct, but recomputes every element 400 times: a deliberately slow first version.
SOURCE = r"""
#include <cstdint>
extern "C" void relu(const float* x, float* out, int64_t n) {
    for (int rep = 0; rep < 400; ++rep) {
        for (int64_t i = 0; i < n; ++i) {
            volatile float v = x[i];
            out[i] = v > 0 ? v : 0.0f;
        }
    }
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
