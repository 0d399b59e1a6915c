"""The CPU example's kernel in KernelBench `load_inline` format (cpp_sources + functions=[...])."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor swish_bias(torch::Tensor x, torch::Tensor bias) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* xp = xc.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    #pragma omp parallel for
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            float v = xp[r * cols + c];
            op[r * cols + c] = v / (1.0f + std::exp(-v)) + bp[c];
        }
    }
    return out;
}
"""

swish = load_inline(name="swish_bias_inline", cpp_sources=cpp_source, functions=["swish_bias"],
                    extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swish.swish_bias(x, self.bias.detach().contiguous())
