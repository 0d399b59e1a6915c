"""A compile error on a known line: expect compile_error naming candidate line 13."""

import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = r"""
extern "C" __global__ void swish_bias(const float* x, const float* bias, float* out, long long n, int cols) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        out[i] = v / (1.0f + expf(-v)) + bias[i % cols] + undefined_thing;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.mod = compile_cuda(SOURCE)

    def forward(self, x):
        return x
