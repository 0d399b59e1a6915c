"""The Metal target's kernel signatures and calls (platforms/metal/_signatures.py, _kernels.py): parsing `kernel`
declarations, binding a call's arguments to the declared types, dispatch sizes, and a library's kernels checked,
counted and forwarded. Runs anywhere: CPU tensors stand in for MPS ones where the device check is not under test,
and torch's native library is a fake (tests/fakes/metal_runtime.py).
"""
from __future__ import annotations

import pytest
import torch

from kforge_core.errors import CompileError
from kforge_core.eval.harness import context, launches
from platforms import metal
from platforms.metal._kernels import MetalLibrary
from platforms.metal._signatures import MetalSignatureError, bind_arguments, normalize_dispatch, parse_kernels
from tests.fakes.metal_runtime import FakeNativeLibrary


def test_parse_implicit_explicit_builtins_templates_and_comments():
    src = r"""
#include <metal_stdlib>
using namespace metal;
struct Params { uint n; float alpha; };
// kernel void commented_out(device float* x) {}
/* kernel void also_commented(device float* x) {} */
kernel void implicit(const device half* a, device float* out, constant Params& p, constant float* w,
                     uint3 tid [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {}
[[kernel, max_total_threads_per_threadgroup(512)]] void explicit_(device int* a [[buffer(2)]],
        constant long& n [[buffer(0)]], device metal::atomic<float>* acc [[buffer(1)]],
        uint i [[thread_position_in_grid]]) {}
template <typename T>
kernel void generic(device T* x, constant T& v, uint i [[thread_position_in_grid]]) { x[i] = v; }
template [[host_name("generic_float")]] kernel void generic<float>(device float* x, constant float& v,
                                                                  uint i [[thread_position_in_grid]]);
"""
    kernels = parse_kernels(src)
    assert set(kernels) == {"implicit", "explicit_", "generic_float"}
    imp = kernels["implicit"]
    assert [imp.buffers[i].name for i in range(4)] == ["a", "out", "p", "w"]
    assert imp.buffers[0].type == "half" and imp.buffers[0].address_space == "device"
    assert imp.grid_dims == 3
    assert imp.line == 7
    exp = kernels["explicit_"]
    assert exp.buffers[0].name == "n" and exp.buffers[1].type == "atomic_float" and exp.buffers[2].name == "a"
    gen = kernels["generic_float"]
    assert gen.n_args == 2 and gen.buffers[1].type == "float"


def test_threadgroup_parameters_are_rejected_with_advice():
    src = ("kernel void k(device float* x, threadgroup float* tmp [[threadgroup(0)]],\n"
           "              uint i [[thread_position_in_grid]]) {}")
    with pytest.raises(MetalSignatureError, match="declare it inside the kernel body"):
        parse_kernels(src)


def test_mixed_buffer_numbering_is_rejected():
    src = "kernel void k(device float* x [[buffer(1)]], device float* y, uint i [[thread_position_in_grid]]) {}"
    with pytest.raises(MetalSignatureError, match=r"\[\[buffer\(i\)\]\] index, or none"):
        parse_kernels(src)


def test_signature_errors_become_compile_errors_on_candidate_lines(monkeypatch):
    kernel = "\nkernel void k(device float* x,\n  texture2d<float> t, uint i [[thread_position_in_grid]]) {}\n"
    candidate = f'import torch\nSOURCE = r"""{kernel}"""\n'
    monkeypatch.setattr(context, "candidate_text", candidate)
    with pytest.raises(CompileError, match=r"candidate line 3: kernel k: parameter .* texture"):
        metal.compile_metal(kernel)


def test_non_ascii_source_is_a_compile_error_with_its_line(monkeypatch):
    kernel = "\n// y = x \u00b7 2\nkernel void k(device float* x, uint i [[thread_position_in_grid]]) { x[i] *= 2; }\n"
    candidate = f'import torch\n\nSOURCE = r"""{kernel}"""\n'
    monkeypatch.setattr(context, "candidate_text", candidate)
    with pytest.raises(CompileError, match="candidate line 4: Metal source must be ASCII"):
        metal.compile_metal(kernel)


# ------------------------------------------------------------------------------------------ argument checking

SIG_SRC = r"""
kernel void k(device const float* x, device float* out, constant uint& n, constant float& alpha,
              constant half& h, constant long& big, constant float* taps, uint i [[thread_position_in_grid]]) {}
kernel void one_d(device float* x, uint i [[thread_position_in_grid]]) {}
"""
SIGS = parse_kernels(SIG_SRC)


def _args(dev="cpu"):
    x = torch.zeros(8, device=dev)
    return [x, torch.empty_like(x), 8, 0.5, 1.5, 2**40, [1.0, 2.0, 3.0]]


def test_binding_narrows_scalars_to_declared_types():
    bound = bind_arguments(SIGS["k"], "k", tuple(_args()), device_type="cpu")
    assert bound.casts == {2: "int32", 4: "fp16"}
    assert bound.args[2] == 8 and bound.args[5] == 2**40 and bound.args[6] == [1.0, 2.0, 3.0]
    args = _args()
    args[3] = 2  # an int for a float parameter is converted, not reinterpreted
    assert bind_arguments(SIGS["k"], "k", tuple(args), device_type="cpu").args[3] == 2.0
    args = _args()
    args[2] = 2**32 - 1  # a uint above INT32_MAX travels as the same bits through the int32 cast
    assert bind_arguments(SIGS["k"], "k", tuple(args), device_type="cpu").args[2] == -1


def test_cpu_tensor_for_a_metal_kernel_is_a_clear_error():
    with pytest.raises(TypeError, match=r"argument 1 \(x\) of k is a tensor on cpu; Metal kernels read MPS "
                                        r"tensors only: move it with \.to\('mps'\)"):
        bind_arguments(SIGS["k"], "k", tuple(_args()))  # device_type defaults to "mps"


@pytest.mark.parametrize("index, value, error, needle", [
    (0, torch.zeros(8, dtype=torch.float16), TypeError, "has dtype torch.float16, but the kernel declares "
                                                         "`device float* x`"),
    (0, torch.zeros(4, 4).t(), TypeError, "not contiguous"),
    (0, 3.0, TypeError, "is a Python number, but the kernel declares `device float* x`"),
    (2, torch.zeros(1, dtype=torch.int32), None, None),  # a tensor for a constant reference binds its buffer
    (2, -1, ValueError, "uint in the kernel; -1 is out of its range"),
    (2, 2.5, TypeError, "is an integer (uint) in the kernel, got the float 2.5"),
    (2, "8", TypeError, "must be an MPS tensor, a Python number or a list of numbers"),
    (1, [1.0, 2.0], TypeError, "is a Python list, but `device float* out` is device memory"),
    (6, [1.0] * 2000, ValueError, "at most 4096 bytes inline"),
    (6, [], ValueError, "empty list"),
])
def test_argument_errors(index, value, error, needle):
    args = _args()
    args[index] = value
    if error is None:
        bind_arguments(SIGS["k"], "k", tuple(args), device_type="cpu")
        return
    with pytest.raises(error) as info:
        bind_arguments(SIGS["k"], "k", tuple(args), device_type="cpu")
    assert needle in str(info.value)


def test_argument_count_is_checked():
    with pytest.raises(TypeError, match=r"k takes 7 arguments .* got 6"):
        bind_arguments(SIGS["k"], "k", tuple(_args()[:6]), device_type="cpu")


def test_unparsed_kernels_get_the_generic_checks():
    bind_arguments(None, "macro_kernel", (torch.zeros(2), 3), device_type="cpu")
    with pytest.raises(TypeError, match="not contiguous"):
        bind_arguments(None, "macro_kernel", (torch.zeros(4, 4).t(),), device_type="cpu")
    with pytest.raises(TypeError, match="MPS tensors only"):
        bind_arguments(None, "macro_kernel", (torch.zeros(2),))


def test_no_arg_casts_support_gives_advice():
    with pytest.raises(TypeError, match="declare integer scalars as `constant long&`"):
        bind_arguments(SIGS["k"], "k", tuple(_args()), device_type="cpu", casts_supported=False)


@pytest.mark.parametrize("threads, group, grid, error, needle", [
    (None, None, None, TypeError, "pass threads="),
    ((0,), None, None, ValueError, "positive integers"),
    ((1, 2, 3, 4), None, None, ValueError, "1 to 3 dimensions"),
    ((64, 4), (64,), None, ValueError, "as many dimensions"),
    ((4096,), (2048,), None, ValueError, "2048 threads per threadgroup; this kernel allows at most 1024"),
    ((64, 8), (64, 1), 1, ValueError, "reads thread_position_in_grid as a scalar"),
])
def test_dispatch_errors(threads, group, grid, error, needle):
    with pytest.raises(error, match=None) as info:
        normalize_dispatch("k", threads, group, 1024, grid)
    assert needle in str(info.value)


def test_dispatch_normalizes_ints_and_allows_unit_extra_dims():
    assert normalize_dispatch("k", 100, 32, 1024, 1) == ((100,), (32,))
    assert normalize_dispatch("k", (100, 1), None, 1024, 1) == ((100, 1), None)


def test_kernel_call_is_checked_counted_and_forwarded():
    native = FakeNativeLibrary()
    lib = MetalLibrary(native, SIGS, "key", cached=False, build_s=0.0, device_type="cpu")
    launches.reset()
    lib.k(*_args(), threads=8, group_size=8)
    lib.k(*_args(), threads=(8,))
    assert launches.snapshot() == {"k": 2}
    args, threads, group, casts = native.kernels["k"].calls[0]
    assert threads == (8,) and group == (8,) and casts == {2: "int32", 4: "fp16"}
    assert native.kernels["k"].calls[1][2] is None  # no group_size: torch picks it
    assert lib.k.max_threads_per_threadgroup == 1024 and lib.k.thread_execution_width == 32
    with pytest.raises(ValueError, match="at most 1024"):
        lib.k(*_args(), threads=8, group_size=2048)
    assert launches.snapshot() == {"k": 2}  # a refused call is not a launch
    assert sorted(dir(lib)) == ["k", "one_d"]


def test_missing_kernel_lists_what_exists():
    lib = MetalLibrary(FakeNativeLibrary({"k": None, "one_d": None}), SIGS, "key", False, 0.0, device_type="cpu")
    with pytest.raises(AttributeError, match=r"no kernel 'nope' \(declared: k, one_d\)"):
        lib.nope
