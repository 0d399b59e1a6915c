"""What the CUDA and Triton targets share: availability, strict fp32, synchronization, timing, L2 flush, the
profiler adapters (torch.profiler with CUDA activities; Nsight Compute when `ncu` is on PATH) and measured ceilings.

Timing: `_timing.DeviceClockTimer`, the device's own clock (its module says why and how). The synchronize, the
stream pool it holds and the clocks are bound in `prepare_child`, before any candidate code exists. Host launch
overhead is not in the time: problems whose reference runs under `tiny_problem_ms` get a warning.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import statistics

from kforge_core.platform import Platform, Timer
from kforge_core.pyast import parse_ast

from ._timing import CompletionCheckedTimer, DeviceClockTimer, pool_streams


def cuda_problem() -> str | None:
    """Why torch cannot run CUDA kernels here, or None when it can. Does not create a CUDA context."""
    import torch

    if torch.version.cuda is None:
        if getattr(torch.version, "hip", None):
            return f"torch {torch.__version__} is a ROCm build; this target needs a CUDA build of torch"
        return (f"torch was built without CUDA (torch {torch.__version__}); install a CUDA build of torch "
                f"(https://pytorch.org/get-started/locally/)")
    try:
        ok = torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception as e:  # noqa: BLE001
        return f"no NVIDIA GPU visible: {e}"
    if not ok:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return (f"no NVIDIA GPU visible{hint}: torch.cuda.is_available() is False with torch {torch.__version__} "
                f"(CUDA {torch.version.cuda}); check `nvidia-smi` and the driver")
    return None


@functools.lru_cache(maxsize=None)
def gpu_summary() -> str:
    import torch

    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"{p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, {p.total_memory / 2 ** 30:.0f} GiB)"


def candidate_kernel_names(candidate_text: str) -> set[str]:
    """Kernel names the candidate defines: CUDA `__global__` functions and `@triton.jit` functions."""
    names = set(re.findall(r"__global__\s+(?:__launch_bounds__\s*\([^()]*\)\s*)?void\s+(?:__launch_bounds__\s*"
                           r"\([^()]*\)\s*)?([A-Za-z_]\w*)\s*\(", candidate_text))
    try:
        tree = parse_ast(candidate_text)
    except SyntaxError:
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            names.add(node.name)
    return names


def driver_synchronize():
    """`cuCtxSynchronize` of the driver, bound through ctypes now, before any candidate code exists: a candidate that
    replaces torch.cuda.synchronize, or the function one level below it (torch._C._cuda_synchronize, for one call
    and restored), changes nothing the timer calls. Falls back to torch's own when libcuda cannot be loaded."""
    import ctypes

    import torch

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn, name = lib.cuCtxSynchronize, lib.cuGetErrorName
    except (OSError, AttributeError):
        return torch._C._cuda_synchronize
    fn.argtypes, fn.restype = [], ctypes.c_int
    name.argtypes, name.restype = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)], ctypes.c_int

    def synchronize() -> None:
        rc = fn()
        if rc != 0:
            text = ctypes.c_char_p()
            name(rc, ctypes.byref(text))
            label = (text.value or b"").decode() or str(rc)
            hint = " (an illegal memory access)" if label == "CUDA_ERROR_ILLEGAL_ADDRESS" else ""
            raise RuntimeError(f"CUDA error: {label}{hint}, reported by cuCtxSynchronize")

    return synchronize


class GpuPlatform(Platform):
    device_type = "cuda"
    has_profiler = True
    profiler_times_device = True  # CUDA activities: kernel durations from CUPTI
    accepts_profiler_screenshots = True
    limit_address_space = False  # the CUDA runtime maps huge virtual ranges; RSS is polled instead
    strict_fp32_controls = True
    allows_inline_asm = True  # inline PTX in kernels
    tiny_problem_ms = 0.05
    fork_server_safe = True  # a "cuda" fork server: torch and Triton imported, the driver never initialised

    _sync = None
    _event_done = None
    _pool: list = []
    _flush_buffer = None

    def make_timer(self) -> Timer:
        if self._event_done is None:  # outside an evaluation child, or no usable GPU
            return Timer(self.synchronize)
        if not self._pool:
            return CompletionCheckedTimer(self._sync, self._event_done)
        return DeviceClockTimer(self._sync, self._event_done, self._pool)

    def device_count(self) -> int:
        """The GPUs this process may use (CUDA_VISIBLE_DEVICES honoured), counted through NVML where it answers, so
        counting never creates a CUDA context in the caller's process (a bench on 2 GPUs ran one worker: the base
        class's 1)."""
        import torch

        try:
            n = torch.cuda._device_count_nvml()
        except Exception:  # noqa: BLE001 - NVML missing or refusing: the runtime's count instead
            n = -1
        if n < 0:
            n = torch.cuda.device_count()
        return max(1, n)

    def device_name(self) -> str:
        if cuda_problem():
            return "cuda (unavailable)"
        return gpu_summary()

    # --- in the child -------------------------------------------------------------------------------------------
    def prepare_child(self) -> None:
        """Strict fp32 (no TF32 anywhere) for the reference, the baselines and the candidate's torch calls; the CUDA
        context is created here, outside any measurement; the synchronize used by the timer is bound now."""
        import sys

        import torch

        # torch.compile (the baseline) compiles its Triton kernels in this process: inductor's compile-worker pool
        # would keep threads and processes running after the trusted compile, which the guards then refuse.
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        if "torch._inductor.config" in sys.modules:
            sys.modules["torch._inductor.config"].compile_threads = 1
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self._sync = torch.cuda.synchronize
        if not cuda_problem():
            torch.cuda.init()
            torch.empty(1, device="cuda")  # create the primary context now
            self._sync = driver_synchronize()
            self._event_done = torch._C._CudaEventBase.query  # bound now: the completion check below
            try:
                self._pool = pool_streams()  # the timer's stream barrier and its question about work left running
            except Exception:  # noqa: BLE001 - no pool to hold: the host-clock timer (make_timer) times instead
                self._pool = []
            self._sync()

    def warm_child(self) -> None:
        """The CUDA context, created after the fork (the fork server never initialises CUDA)."""
        if not cuda_problem():
            import torch

            torch.cuda.init()
            torch.empty(1, device="cuda")
            torch.cuda.synchronize()

    def synchronize(self) -> None:
        if self._sync is None:  # outside an evaluation child (tests, tools)
            import torch

            self._sync = torch.cuda.synchronize
        self._sync()

    def cache_bytes(self) -> int | None:
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return int(getattr(props, "L2_cache_size", 0) or 0) or None

    def flush_cache(self) -> None:
        import torch

        if self._flush_buffer is None:
            l2 = self.cache_bytes() or (64 << 20)
            self._flush_buffer = torch.empty(max(2 * l2, 32 << 20) // 4, dtype=torch.int32, device="cuda")
        self._flush_buffer.zero_()  # writing 2x L2 evicts the inputs; the timer synchronizes before its start

    def profile(self, run, trials: int = 5) -> dict:
        from kforge_core.eval.harness import context

        summary, names = self._torch_profile(run, trials)
        from ._ncu import ncu_profile

        ncu = ncu_profile(self.name, names, getattr(context, "request", {}) or {})
        if ncu is not None:
            summary["ncu"] = ncu
        return summary

    def custom_share(self, run) -> float | None:
        return self._torch_profile(run, 3)[0].get("custom_share")  # torch.profiler only: no Nsight Compute run

    def _torch_profile(self, run, trials: int) -> tuple[dict, set[str]]:
        from torch.profiler import ProfilerActivity, profile

        from kforge_core.eval.harness import context, launches
        from kforge_core.profiling import summarize_torch_profile

        run()
        self.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(trials):
                run()
            self.synchronize()
        names = candidate_kernel_names(context.candidate_text)
        names |= {k for k in launches.snapshot() if "." not in k}  # NVRTC / Triton kernels (not load_inline hosts)
        summary = summarize_torch_profile(prof, trials, tool="torch.profiler (CUDA activities)",
                                          device=self.device_name(), custom_names=names)
        if not any(k.get("custom") for k in summary["kernels"]):
            summary["notes"].append("no device kernel matched the candidate's kernel names "
                                    f"({', '.join(sorted(names)) or 'none found'})")
        return summary, names

    def measure_ceilings(self) -> dict:
        """Device-to-device copy (bytes read + written) and large bf16 / strict-fp32 matmuls; medians of 5 timed with
        CUDA events after a warm-up. Scaled down when the GPU has little free memory."""
        import torch

        dev = torch.device("cuda", torch.cuda.current_device())
        free, _ = torch.cuda.mem_get_info(dev)

        def median_ms(fn, reps: int = 5) -> float:
            fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            return statistics.median(times)

        out: dict = {}
        nbytes = min(1 << 30, free // 8)

        def copy_ms() -> float:
            src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).uniform_()
            dst = torch.empty_like(src)
            return median_ms(lambda: dst.copy_(src))

        def matmul_ms(n: int, dtype) -> float:
            a = torch.randn(n, n, device=dev, dtype=dtype)
            b = torch.randn(n, n, device=dev, dtype=dtype)
            return median_ms(lambda: torch.mm(a, b))

        out["bandwidth_gbs"] = round(2 * nbytes / (copy_ms() / 1e3) / 1e9, 1)
        n = 8192 if free > (3 << 30) else 4096
        for dtype, key in ((torch.bfloat16, "bf16_tflops"), (torch.float32, "fp32_tflops")):
            out[key] = round(2 * n ** 3 / (matmul_ms(n, dtype) / 1e3) / 1e12, 2)
        torch.cuda.empty_cache()
        out["method"] = (f"{nbytes >> 20} MiB device-to-device copy (read+write); {n}^3 bf16 and fp32 matmuls "
                         f"(fp32 with TF32 off); median of 5, CUDA events")
        return out
