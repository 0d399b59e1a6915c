"""A synthesized CUDA candidate's column kernels run on the CPU, for tests on machines without a GPU: the kernel text
as written, compiled by g++ with a few stand-ins (a thread a CUDA thread, a block's threads started together and
its __syncthreads a std::barrier, blocks one after another so `__shared__` may be a static and `extern __shared__`
the launch's shared_mem bytes), launched through the candidate's own Python launch code (`candidate`: its `compile_cuda` replaced, the device properties given).

Only what the column kernels use is stood in for; a kernel reading other CUDA built-ins does not compile here."""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import torch

from tests.nvrtc_only import kernel_source

HAVE_GPP = shutil.which("g++") is not None
_BOUNDS = r"(?:__launch_bounds__\([^)]*\) )?"  # a kernel's launch bounds, between `void` and its name

_HARNESS = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <thread>
#include <vector>
struct kf_dim3 { unsigned int x = 1, y = 1, z = 1; };
static thread_local kf_dim3 threadIdx;
static kf_dim3 blockIdx, blockDim, gridDim;
static std::barrier<>* kf_bar;
static void* kf_dynamic_smem;  // the launch's shared_mem bytes, for `extern __shared__` arrays
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
#define __syncthreads() kf_bar->arrive_and_wait()
using std::isinf;
using std::min;
// the CUDA prelude's math that fused chains call
static inline float kf_exp(float v) { return std::exp(v); }
static inline float kf_log(float v) { return std::log(v); }
static inline float kf_tanh(float v) { return std::tanh(v); }
"""

_LAUNCH = r"""
extern "C" void {name}_run(void** args, unsigned int gx, unsigned int bx, unsigned int by, void* smem) {{
    kf_dynamic_smem = smem;
    blockDim = {{bx, by, 1}};
    gridDim = {{gx, 1, 1}};
    for (unsigned int b = 0; b < gx; ++b) {{
        blockIdx = {{b, 0, 0}};
        std::barrier<> bar(bx * by);
        kf_bar = &bar;
        std::vector<std::thread> threads;
        for (unsigned int y = 0; y < by; ++y)
            for (unsigned int x = 0; x < bx; ++x)
                threads.emplace_back([=] {{ threadIdx = {{x, y, 1}}; {name}({call}); }});
        for (auto& t : threads) t.join();
    }}
}}
"""


def column_kernels(program: str) -> str:
    """The column kernels' text of a candidate (the end of its SOURCE, from the column helpers on)."""
    src = kernel_source(program)
    return src[src.index("__device__ __forceinline__ bool kf_isinf"):]


def _params(text: str, name: str) -> list[str]:
    """The parameter declarations of kernel `name`."""
    m = re.search(rf'extern "C" __global__ void {_BOUNDS}{name}\(([^)]*)\)', text)
    return [p.strip() for p in m.group(1).split(",")]


class EmulatedModule:
    """The candidate's `compile_cuda(SOURCE)` result: each column kernel callable as
    `mod.<name>(grid=(g,), block=(bx, by), args=(...))`, tensors (CPU) passed by address, sizes as long long."""

    def __init__(self, text: str, workdir: Path):
        names = re.findall(rf'extern "C" __global__ void {_BOUNDS}(\w+)\(', text)
        runs = []
        for name in names:
            params = _params(text, name)
            call = ", ".join(f"*({p.rsplit(' ', 1)[0].replace('__restrict__', '').strip()}*)args[{i}]"
                             for i, p in enumerate(params))
            runs.append(_LAUNCH.format(name=name, call=call))
        text = re.sub(r"extern __shared__ (\w+) (\w+)\[\];", r"\1* \2 = (\1*)kf_dynamic_smem;", text)
        source = _HARNESS + text + "".join(runs)
        key = hashlib.sha256(source.encode()).hexdigest()[:16]
        cpp, lib = workdir / f"cols_{key}.cpp", workdir / f"cols_{key}.so"
        if not lib.exists():
            cpp.write_text(source)
            proc = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", str(cpp), "-o",
                                   str(lib)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr[-4000:]
        self._lib = ctypes.CDLL(str(lib))
        self._params = {n: _params(text, n) for n in names}

    def __getattr__(self, name):
        if name.startswith("_") or name not in self._params:
            raise AttributeError(name)
        fn = getattr(self._lib, f"{name}_run")

        def launch(grid, block, args, shared_mem=0):
            block = tuple(block) + (1,) * (3 - len(block))
            assert block[2] == 1 and len(args) == len(self._params[name])
            slots = []
            for a in args:  # pointers and sizes as the kernel's parameters hold them
                if a is None:
                    slots.append(ctypes.c_void_p(0))
                elif isinstance(a, torch.Tensor):
                    assert a.device.type == "cpu" and (a.is_contiguous() or a.dim() == 1)
                    slots.append(ctypes.c_void_p(a.data_ptr()))
                else:
                    slots.append(ctypes.c_longlong(int(a)))
            argv = (ctypes.c_void_p * len(slots))(*[ctypes.addressof(s) for s in slots])
            smem = (ctypes.c_double * max(1, -(-shared_mem // 8)))()  # zeroed, 8-byte aligned
            fn(argv, ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), ctypes.c_uint(block[1]), smem)

        return launch


def candidate(program: str, sms: int, workdir: Path | None = None):
    """A constructor of the candidate's ModelNew with its column kernels emulated on the CPU, as on a GPU of `sms`
    SMs, and the emulated module."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="kf_emul_"))
    mod = EmulatedModule(column_kernels(program), workdir)
    ns: dict = {}
    exec(compile(program, "candidate", "exec"), ns)  # noqa: S102 - our own synthesized program
    ns["compile_cuda"] = lambda source: mod
    props = SimpleNamespace(multi_processor_count=sms, major=9, minor=0, shared_memory_per_block_optin=232448)

    def build(*init):
        with mock.patch.object(torch.cuda, "current_device", lambda: 0), \
                mock.patch.object(torch.cuda, "get_device_properties", lambda d: props):
            return ns["ModelNew"](*init)

    return build, mod
