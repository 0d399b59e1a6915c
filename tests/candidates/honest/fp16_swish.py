"""Half-precision swish computed in float and rounded once (torch rounds after every op): within half tolerance."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

extern "C" void swish_half(const uint16_t* x, uint16_t* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        _Float16 h;
        std::memcpy(&h, x + i, 2);
        float v = (float)h;
        _Float16 r = (_Float16)(v / (1.0f + std::exp(-v)));
        std::memcpy(out + i, &r, 2);
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_half(x, out, x.numel())
        return out
