"""Dropout through torch's generator (the same numbers as the reference's, drawn in the same order), then its own
kernel for the rest."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>

extern "C" void tanh2(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(x[i] * 2.0f);
}
"""


class ModelNew(nn.Module):
    def __init__(self, dropout_p: float):
        super().__init__()
        self.p = dropout_p
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.dropout(x, self.p, self.training).contiguous()
        out = torch.empty_like(y)
        self.lib.tanh2(y, out, y.numel())
        return out
