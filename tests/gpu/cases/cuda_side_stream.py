"""Hostile timing: all work on a side stream that never joins the current one, after a ~3 ms spin. The output is
right (the evaluator synchronizes the whole device), and the measured time must include the side-stream work."""

import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = r"""
extern "C" __global__ void slow_swish_bias(const float* x, const float* bias, float* out, long long n, int cols,
                                           long long spin_cycles) {
    long long start = clock64();
    while (clock64() - start < spin_cycles) { }
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        out[i] = v / (1.0f + expf(-v)) + bias[i % cols];
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.mod = compile_cuda(SOURCE)
        self.side = torch.cuda.Stream()
        self.cycles = 6_000_000  # ~3 ms at 2 GHz, more at lower clocks

    def forward(self, x):
        out = torch.empty_like(x)
        self.side.wait_stream(torch.cuda.current_stream())
        self.mod.slow_swish_bias(grid=(1024,), block=(256,), stream=self.side,
                                 args=(x, self.bias.detach(), out, x.numel(), x.shape[1], self.cycles))
        return out  # never joined back: events on the current stream would miss the work
