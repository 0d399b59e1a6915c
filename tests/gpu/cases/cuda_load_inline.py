"""Honest KernelBench-style candidate: load_inline with cuda_sources, launched through a C++ wrapper."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void swish_bias_kernel(const float* x, const float* bias, float* out, long long n, int cols) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        out[i] = v / (1.0f + expf(-v)) + bias[i % cols];
    }
}

torch::Tensor swish_bias_cuda(torch::Tensor x, torch::Tensor bias) {
    auto out = torch::empty_like(x);
    long long n = x.numel();
    const int threads = 256;
    const long long blocks = (n + threads - 1) / threads;
    swish_bias_kernel<<<blocks, threads>>>(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n,
                                           (int)x.size(1));
    return out;
}
"""

cpp_source = "torch::Tensor swish_bias_cuda(torch::Tensor x, torch::Tensor bias);"

swish_bias = load_inline(name="swish_bias_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                         functions=["swish_bias_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return swish_bias.swish_bias_cuda(x.contiguous(), self.bias.detach().contiguous())
