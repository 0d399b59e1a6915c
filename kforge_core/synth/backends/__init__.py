"""Candidate formats the built-in generator writes, chosen from the target platform's declared attributes
(its `candidate_api` and `formats`), never from its name.

- `compile_cpp` (ctypes C++, the CPU target): `codegen_cpu`;
- `compile_cuda` (NVRTC/nvcc helper) or KernelBench `load_inline`: `codegen_cuda`;
- `triton` (`@triton.jit` kernels launched from Python): `codegen_triton`;
- `compile_metal` (Metal shading language): `codegen_metal`.
"""

from __future__ import annotations

import json

from . import columns, cpu as codegen_cpu, emit
from .base import Backend
from ...platform import TargetSpec


class CppCtypesBackend(Backend):
    kind = "cpp-ctypes"
    fuses_cat = True
    half_dtypes = ("bfloat16", "float16")
    column_kernels = True

    def program(self, plan, desc, sched, target, header, marker):
        src = codegen_cpu.source(plan.kernels, sched) + columns.cpu_source(plan.columns, sched)
        flags = codegen_cpu.cflags(sched)
        tail = [f"self.kf_lib = compile_cpp(SOURCE, extra_cflags={flags!r})"]
        return emit.candidate(plan, desc, header=header, marker=marker,
                              imports=[f"from {target.module} import compile_cpp"], source_name="SOURCE",
                              source_text=src, init_tail=tail,
                              launch=lambda kp, names: codegen_cpu.launch_lines(kp, names),
                              columns=columns.cpu_launch)


def select_backend(target: TargetSpec) -> Backend | None:
    api = set(target.candidate_api)
    if "compile_cpp" in api:
        return CppCtypesBackend()
    try:
        from .cuda import writer as codegen_cuda
        from . import metal as codegen_metal, triton as codegen_triton
    except ImportError:  # pragma: no cover - the GPU writers are optional
        return None
    if "compile_metal" in api:
        return codegen_metal.MetalBackend()
    if target.kernel_language == "python" or "triton" in target.formats or "triton" in api:
        return codegen_triton.TritonBackend()
    if "compile_cuda" in api or "load_inline" in target.formats or target.kernel_language == "cuda":
        return codegen_cuda.CudaBackend()
    return None


def dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True)
