"""CUDA target: CUDA C++ kernels compiled at run time by NVRTC and launched on torch tensors.

Candidate formats:
- `nvrtc` (the fast default): `from platforms.cuda import compile_cuda`; `mod = compile_cuda(SOURCE)` in
  `ModelNew.__init__`; in `forward`, `mod.my_kernel(grid=(blocks,), block=(256,), args=(x, out, n))` launches the
  source's `__global__ void my_kernel(const float* x, float* out, int n)` on torch's current stream. Arguments are
  checked against the kernel's C signature (device, contiguity, dtype vs pointer type, alignment of vector types,
  integer range), launches are counted, builds are cached by source hash, NVRTC diagnostics name candidate lines.
  `compile_cuda(source, options=("--use_fast_math",), arch="sm_90a")` passes NVRTC options / a target.
- `load_inline`: KernelBench's `torch.utils.cpp_extension.load_inline(..., cuda_sources=...)` as is, with builds
  cached by hash (nvcc through torch's build system: tens of seconds cold, a fraction of a second cached).

Binding: ctypes on libnvrtc + the CUDA driver API (see `platforms.cuda._nvrtc` for why). Evaluation: strict fp32
(TF32 off for the reference, the baselines and the candidate's torch calls), device-wide synchronize, L2 flush,
torch.profiler with CUDA activities plus Nsight Compute when `ncu` is on PATH (see `platforms.cuda._common`).
"""

from __future__ import annotations

from kforge_core.platform import Availability

from ._common import GpuPlatform, cuda_problem, gpu_summary
from ._locate import nvrtc_candidates, nvrtc_on_disk
from ._nvrtc import compile_module


def compile_cuda(source: str, *, options=(), arch: str | None = None, device=None):
    """Compile CUDA C++ `source` with NVRTC (cached by hash) for the current GPU and return its kernels.

    `mod.<kernel>(grid=..., block=..., args=(...), shared_mem=0, stream=None)` launches a `__global__` function
    (declare it `extern "C"` or not; templates need an `extern "C"` wrapper). `mod.info()` gives registers, local
    memory and static shared memory per kernel. Raises CompileError with diagnostics mapped to candidate lines.
    """
    return compile_module(source, options=options, arch=arch, device=device)


def _nvrtc_loadable() -> str | None:
    path = nvrtc_on_disk()
    if path:
        return path
    import ctypes

    from kforge_core.eval.harness import guards

    for cand in nvrtc_candidates():
        try:
            with guards.trusted():
                ctypes.CDLL(cand)
            return cand
        except OSError:
            continue
    return None


class CudaPlatform(GpuPlatform):
    name = "cuda"
    title = "CUDA (C++ kernels via NVRTC, or load_inline)"
    kernel_language = "cuda"
    formats = ("nvrtc", "load_inline")
    candidate_api = ("compile_cuda",)
    module_name = "platforms.cuda"

    def availability(self) -> Availability:
        problem = cuda_problem()
        if problem:
            return Availability(False, problem)
        nvrtc = _nvrtc_loadable()
        if nvrtc is None:
            return Availability(False, "NVRTC not found: torch's CUDA wheels depend on nvidia-cuda-nvrtc; install "
                                       "the one matching torch's CUDA, or set KFORGE_NVRTC=/path/to/libnvrtc.so")
        import torch

        return Availability(True, f"{gpu_summary()}; torch {torch.__version__}; NVRTC {nvrtc}")

    def prepare_child(self) -> None:
        super().prepare_child()
        from kforge_core.eval.harness import inline_cache

        inline_cache.install()
        if not cuda_problem():
            from ._binding import NvrtcNotFound, api

            try:
                api()  # dlopen + symbol lookup now, trusted, outside the candidate's build time
            except NvrtcNotFound:
                pass  # compile_cuda reports it as a compile error with the reason


PLATFORM = CudaPlatform()
