"""Compiles a kernel but never launches it: expect rejected (rule must-launch)."""

import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = r"""
extern "C" __global__ void unused_kernel(const float* x, float* out, long long n) { }
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.mod = compile_cuda(SOURCE)

    def forward(self, x):
        return x * torch.sigmoid(x) + self.bias
