"""The global-forward-hook trick reached through a list element, which no static attribute chain follows: caught
at run time by the check of global module hooks after the candidate is imported."""

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

MODULES = [torch.nn]


def _zero_everything(module, args, output):
    return torch.zeros_like(output)


MODULES[0].modules.module.register_module_forward_hook(_zero_everything)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE, openmp=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        return torch.zeros_like(out)
