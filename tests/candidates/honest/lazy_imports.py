"""The CPU example's kernel behind public torch APIs whose first call imports torch modules lazily:
torch.broadcast_shapes imports sympy (torch.fx.experimental.symbolic_shapes), and torch.utils.checkpoint (like
everything wrapped by torch._disable_dynamo) imports torch._dynamo, whose top-level code sets os.environ and rebinds
torch.manual_seed. Those imports are torch's own code, not the candidate's."""

import torch
import torch.nn as nn
import torch.utils.checkpoint

from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>

extern "C" void swish_bias(const float* x, const float* bias, float* out, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = x[r * cols + c];
            out[r * cols + c] = v / (1.0f + std::exp(-v)) + bias[c];
        }
}
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE, openmp=False)

    def _swish(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.broadcast_shapes(x.shape, self.bias.shape) != x.shape:
            raise ValueError("bias does not broadcast over x")
        return torch.utils.checkpoint.checkpoint(self._swish, x.contiguous(), use_reentrant=False)
