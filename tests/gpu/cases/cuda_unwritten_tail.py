"""Hostile: the grid covers only whole blocks, so the last n % 256 elements are never written. Expect incorrect."""

import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = r"""
extern "C" __global__ void swish(const float* x, float* out) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    float v = x[i];
    out[i] = v / (1.0f + expf(-v));
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.mod = compile_cuda(SOURCE)

    def forward(self, x):
        out = torch.empty_like(x)
        self.mod.swish(grid=(x.numel() // 256,), block=(256,), args=(x, out))
        return out
