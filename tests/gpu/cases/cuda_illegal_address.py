"""Hostile: writes far outside its output (an illegal address). Expect runtime_error; the next evaluation is fine."""

import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = r"""
extern "C" __global__ void swish_bad(const float* x, float* out, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i + (1LL << 38)] = x[i];  // 1 TiB past the buffer
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.mod = compile_cuda(SOURCE)

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        self.mod.swish_bad(grid=((n + 255) // 256,), block=(256,), args=(x, out, n))
        return out
