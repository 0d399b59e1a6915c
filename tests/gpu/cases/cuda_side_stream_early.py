"""Hostile timing: the work on a side stream that does not wait for the current one, joined back before returning.
Under a device-clock timer whose lead-in holds only the current stream, this work would run during the lead-in,
before the start event, and the call would look almost free; the timer holds every stream of torch's pool until
its start, so the ~3 ms of work must be in the measured time."""

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
        # no wait on the current stream: the inputs are ready (the judge wrote them before the call), so the side
        # stream is free to start at once
        self.mod.slow_swish_bias(grid=(1024,), block=(256,), stream=self.side,
                                 args=(x, self.bias.detach(), out, x.numel(), x.shape[1], self.cycles))
        torch.cuda.current_stream().wait_stream(self.side)  # joined: the output is ready on the current stream
        return out
