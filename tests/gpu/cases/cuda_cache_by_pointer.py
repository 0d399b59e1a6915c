"""Hostile: computes once per input address and returns the cached result afterwards. Expect incorrect (inputs are
rewritten in place at the same addresses)."""

import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = r"""
extern "C" __global__ void swish_bias(const float* x, const float* bias, float* out, long long n, int cols) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        out[i] = v / (1.0f + expf(-v)) + bias[i % cols];
    }
}
extern "C" __global__ void nothing(float* out) { }
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.mod = compile_cuda(SOURCE)
        self.cache = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key in self.cache:
            self.mod.nothing(grid=(1,), block=(1,), args=(self.cache[key],))
            return self.cache[key].clone()
        out = torch.empty_like(x)
        self.mod.swish_bias(grid=(1024,), block=(256,), args=(x, self.bias.detach(), out, x.numel(), x.shape[1]))
        self.cache[key] = out
        return out.clone()
