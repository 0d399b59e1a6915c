"""Swish + bias fused into one CUDA kernel (NVRTC): one read of x, one write of the output, float4 accesses."""

import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = r"""
extern "C" __global__ void swish_bias(const float4* __restrict__ x, const float* __restrict__ bias,
                                      float4* __restrict__ out, long long n4, int cols4) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
         i += (long long)gridDim.x * blockDim.x) {
        float4 v = x[i];
        int c = (int)(i % cols4) * 4;
        float4 r;
        r.x = v.x / (1.0f + __expf(-v.x)) + bias[c];
        r.y = v.y / (1.0f + __expf(-v.y)) + bias[c + 1];
        r.z = v.z / (1.0f + __expf(-v.z)) + bias[c + 2];
        r.w = v.w / (1.0f + __expf(-v.w)) + bias[c + 3];
        out[i] = r;
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        assert features % 4 == 0, "this kernel reads float4 vectors along a row"
        self.bias = nn.Parameter(torch.randn(features))
        self.mod = compile_cuda(SOURCE)
        self.sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n4 = x.numel() // 4
        blocks = min((n4 + 255) // 256, self.sms * 8)
        self.mod.swish_bias(grid=(blocks,), block=(256,),
                            args=(x, self.bias.detach().contiguous(), out, n4, x.shape[1] // 4))
        return out
