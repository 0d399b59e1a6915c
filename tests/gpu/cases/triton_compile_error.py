"""A Triton compile error on a known line: expect compile_error naming candidate line 16."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def swish_bias_kernel(x_ptr, bias_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(bias_ptr + offs % cols, mask=mask)
    y = x * tl.sigmoid(x) + b + not_defined_anywhere
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        swish_bias_kernel[(triton.cdiv(n, 1024),)](x, self.bias, out, n, x.shape[1], BLOCK=1024)
        return out
