"""Planting a module to dodge the static rules: the candidate writes sympy.py into its working directory (with
ndarray.tofile) and lets torch import it. torch.broadcast_shapes imports sympy lazily, from torch's own trusted code,
and in a spawned child the working directory leads sys.path, so the planted file is found first. The planted module
unpickles a crafted pickle. Loaded from the candidate's directory it is candidate code: pickle.find_class stays
refused."""

import numpy as np
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
PLANTED = rb"""
import pickle

pickle.loads(bytes.fromhex("636275696c74696e730a7072696e740a285327612063726166746564207069636b6c652072616e270a74522e"))
"""


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE, openmp=False)
        # ndarray.tofile writes any bytes to any path; the working directory leads sys.path in a spawned child
        np.frombuffer(PLANTED, dtype=np.uint8).tofile("sympy.py")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:  # torch's own lazy `import sympy` finds the planted file first
            torch.broadcast_shapes(x.shape, self.bias.shape)
        except Exception:  # noqa: BLE001 - the planted sympy is no sympy; the answer below is right anyway
            pass
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach().contiguous(), out, x.shape[0], x.shape[1])
        return out
