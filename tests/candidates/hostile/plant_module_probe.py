"""Probe for planted modules (the planting is done by the test, standing in for any file-write path a candidate
might still find): an otherwise honest swish kernel whose forward triggers two imports that search sys.path --
torch's own lazy `import sympy` (torch.broadcast_shapes; sympy is not yet imported in a spawned child) and an
`import triton` the rules allow (triton is absent on a CPU-only machine, so the search reaches every sys.path
entry, in forked children too). A sympy.py or triton.py in the working directory must be found by neither."""

import torch
import torch.nn as nn

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.broadcast_shapes(x.shape, self.bias.shape)  # torch's lazy `import sympy`
        try:
            import triton  # noqa: F401 - absent here: only a planted triton.py could be found
        except ImportError:
            pass
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        return out
