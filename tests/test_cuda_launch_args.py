"""The CUDA launcher's argument path without a GPU: a fake driver API stands in for libcuda, so what reaches
cuLaunchKernel (grid, block, stream and the kernelParams array) is checked exactly. The launcher keeps one holder per
parameter and a kernelParams array pointing at them; each launch must store its own values there."""

from __future__ import annotations

import ctypes
import struct

import pytest

from platforms.cuda._launch import CudaKernel
from platforms.cuda._signatures import parse_kernels

SOURCE = ('extern "C" __global__ void k(const float* x, long long n, int m, float s, bool flag, __half h, '
          'unsigned char u) {}')


class FakeApi:
    def __init__(self):
        self.launches = []

    def cuFuncGetAttribute(self, out, attr, func):  # noqa: N802 - the driver's name
        out._obj.value = {0: 1024, 4: 32}.get(attr, 0)
        return 0

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # noqa: N802
        sig = parse_kernels(SOURCE)["k"]
        types = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_float, ctypes.c_bool, ctypes.c_uint16,
                 ctypes.c_uint8]
        values = [t.from_address(params[i]).value for i, t in enumerate(types[:len(sig.params)])]
        self.launches.append({"grid": (gx, gy, gz), "block": (bx, by, bz), "shared": shared, "stream": stream,
                              "values": values})
        return 0

    def cu_error(self, code):
        return f"error {code}"


class FakeModule:
    def __init__(self):
        self._api = FakeApi()
        self.device_index = 0
        self.shared_optin = 227 * 1024
        self.current_stream = lambda: 1234


@pytest.fixture
def kernel():
    return CudaKernel(FakeModule(), parse_kernels(SOURCE)["k"], ctypes.c_void_p(1))


def test_each_launch_passes_its_own_values(kernel):
    kernel(grid=3, block=(64, 2), args=(None, 1 << 40, -7, 2.5, True, 1.5, 255))
    kernel(grid=(5, 1), block=32, args=(0, 9, 8, -1.0, False, -2.0, 0))
    first, second = kernel._m._api.launches
    half = lambda v: struct.unpack("<H", struct.pack("<e", v))[0]  # noqa: E731
    assert first["values"] == [None, 1 << 40, -7, 2.5, True, half(1.5), 255]
    assert second["values"] == [None, 9, 8, -1.0, False, half(-2.0), 0]
    assert first["grid"] == (3, 1, 1) and first["block"] == (64, 2, 1) and first["stream"] == 1234
    assert second["grid"] == (5, 1, 1) and second["block"] == (32, 1, 1)


def test_bad_arguments_are_refused_before_any_launch(kernel):
    good = [None, 1, 2, 0.5, True, 1.0, 3]
    cases = [
        (2, 1 << 31, OverflowError, "does not fit the kernel's int"),
        (6, 256, OverflowError, "does not fit the kernel's unsigned char"),
        (6, -1, OverflowError, "unsigned char"),
        (1, 2.5, TypeError, "is an integer (long long) in the kernel, got the float 2.5"),
        (3, "x", TypeError, "must be a Python number"),
        (0, [1, 2], TypeError, "must be a CUDA tensor"),
    ]
    for index, value, exc, text in cases:
        args = list(good)
        args[index] = value
        with pytest.raises(exc, match=text.replace("(", r"\(").replace(")", r"\)")):
            kernel(grid=1, block=1, args=tuple(args))
    with pytest.raises(TypeError, match="must hold Python ints"):
        kernel(grid=(True,), block=1, args=tuple(good))
    with pytest.raises(ValueError, match="at least 1"):
        kernel(grid=0, block=1, args=tuple(good))
    with pytest.raises(ValueError, match="allows at most 1024 per block"):
        kernel(grid=1, block=(1024, 2), args=tuple(good))
    with pytest.raises(TypeError, match="takes 7 arguments"):
        kernel(grid=1, block=1, args=tuple(good[:-1]))
    assert kernel._m._api.launches == []


def test_a_cpu_tensor_is_refused_with_the_fix(kernel):
    import torch

    with pytest.raises(TypeError, match=r"argument 1 \(x\) of k is on cpu; the kernel needs a CUDA tensor"):
        kernel(grid=1, block=1, args=(torch.zeros(4), 1, 2, 0.5, True, 1.0, 3))


def test_integral_floats_and_one_element_tensors_are_accepted(kernel):
    import torch

    kernel(grid=1, block=1, args=(None, 4.0, torch.tensor(6), torch.tensor(0.25), 1, 1.0, 3))
    assert kernel._m._api.launches[0]["values"][1:5] == [4, 6, 0.25, True]
