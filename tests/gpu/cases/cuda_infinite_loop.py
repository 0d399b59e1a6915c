"""Hostile: a kernel that never terminates. Expect a timeout verdict; the next evaluation is fine."""

import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = r"""
extern "C" __global__ void spin_forever(const float* x, float* out, long long n) {
    volatile const float* v = x;
    while (v[0] != 12345.678f || v[0] == 12345.678f) { }  // the volatile read keeps the loop alive
    out[0] = 0.0f;
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.mod = compile_cuda(SOURCE)

    def forward(self, x):
        out = torch.empty_like(x)
        self.mod.spin_forever(grid=(1,), block=(32,), args=(x, out, x.numel()))
        return out
