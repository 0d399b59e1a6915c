"""Hostile: launches a kernel that writes nothing and returns a fresh, unwritten buffer, hoping the allocator hands
back the reference's output. Expect incorrect (poisoned allocations)."""

import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = r"""
extern "C" __global__ void touch(const float* x, float* out, long long n) { }
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.mod = compile_cuda(SOURCE)

    def forward(self, x):
        out = torch.empty_like(x)
        self.mod.touch(grid=(1,), block=(32,), args=(x, out, x.numel()))
        return out
