"""Zero output on tiny-valued outputs: with outputs ~1e-6 and atol 1e-4, all zeros pass an absolute-only check
(KernelBench-style allclose). Defeated by the relative-L2 bound."""

import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cstdint>

extern "C" void zeros(float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        self.lib.zeros(out, out.numel())
        return out
