"""CPU target: C++ (OpenMP allowed) compiled by the system compiler into a shared library, called through ctypes.

Candidate formats:
- `ctypes` (the fast default): `from platforms.cpu import compile_cpp`; `lib = compile_cpp(SOURCE)`; call the
  source's `extern "C"` functions on tensors: `lib.my_kernel(x, out, x.numel())`. 0.03–0.14 s per cold build here.
- `load_inline`: KernelBench's `torch.utils.cpp_extension.load_inline(...)` as is, with builds cached by hash.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform as _pyplatform
import shutil
import subprocess
import time
from pathlib import Path

from kforge_core.build_cache import cached_build
from kforge_core.errors import CompileError
from kforge_core.eval.harness import context, guards, launches, native
from kforge_core.platform import Availability, Platform
from kforge_core.source_map import map_diagnostics, source_start_line, summarize_errors


BASE_FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-std=c++17")


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++") or shutil.which("clang++")


@functools.lru_cache(maxsize=None)
def _compiler_version(cxx: str) -> str:
    with guards.trusted():
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0] if out.stdout else cxx


@functools.lru_cache(maxsize=None)
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _pyplatform.processor() or _pyplatform.machine()


def compile_cpp(source: str, *, openmp: bool = True, extra_cflags: tuple[str, ...] = ()):
    """Compile C++ `source` into a shared library (cached by hash) and return its extern "C" functions.

    Raises CompileError with diagnostics mapped to the candidate's own line numbers.
    """
    # imported here: discovering platforms in the caller's process must not import torch (1.4 s on 2 cores)
    from ._ctypes_kernels import KernelLibrary, SignatureError, parse_signatures

    cxx = _compiler()
    if cxx is None:
        raise CompileError("no C++ compiler found (install g++ or set CXX)")
    try:
        signatures = parse_signatures(source)
    except SignatureError as e:
        raise CompileError(f"cannot call this kernel from Python: {e}") from None
    if not signatures:
        raise CompileError('the source declares no extern "C" function; declare the entry points as '
                           '`extern "C" void name(const float* x, float* out, int64_t n)`')
    native.vet_source("compile_cpp", source)  # the text actually compiled, however it was assembled
    native.vet_flags("compile_cpp", extra_cflags=list(extra_cflags))
    flags = (*BASE_FLAGS, *(("-fopenmp",) if openmp else ()), *extra_cflags)
    start = time.perf_counter()
    # a build is vetted when it is made (a refused one leaves no cache entry): the rules' version is in the key
    args = {"source": source, "flags": list(flags), "cxx": cxx, "compiler": _compiler_version(cxx),
            "cpu": _cpu_model(), "vetting": native.VETTING_VERSION, "_candidate_text": context.candidate_text}
    directory, cached = cached_build("cpu", args)
    key = directory.name
    build_s = time.perf_counter() - start
    launches.record_build("cpu", key, cached, build_s)
    try:
        with guards.trusted():  # dlopen/dlsym are refused to candidate code, not to us
            cdll = ctypes.CDLL(str(directory / "kernel.so"))
            return KernelLibrary(cdll, signatures, str(directory / "kernel.so"), cached, build_s)
    except AttributeError as e:
        raise CompileError(f"a declared function is missing from the library: {e}") from None


def build_library(directory: Path, *, source: str, flags: list[str], cxx: str, compiler: str, cpu: str,
                  vetting: int | str, _candidate_text: str | None = None) -> None:
    """The registered builder (`kforge_core.build_cache.BUILDERS`): kernel.so from `source`, in a build child,
    vetted as it is made. `compiler`, `cpu` and `vetting` are part of the cache key only."""
    (directory / "kernel.cpp").write_text(source)
    # compile, then link: the object is the candidate's own code (what it imports, nothing the linker adds),
    # and -MMD lists the non-system files the compiler read, however the #include was spelled
    compile_flags = [f for f in flags if f != "-shared"]
    with guards.trusted():
        proc = subprocess.run([cxx, *compile_flags, "-MMD", "-MF", "kernel.d", "-c", "kernel.cpp", "-o",
                               "kernel.o"], cwd=directory, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        log = native.sanitize_compiler_log(proc.stderr, ("kernel.cpp",), native.system_include_dirs(cxx))
        start_line = source_start_line(source, _candidate_text)
        mapped, diags = map_diagnostics(log, ("kernel.cpp",), start_line, source)
        summary = summarize_errors(diags) or (log.strip().splitlines() or ["unknown error"])[-1]
        raise CompileError(f"C++ compilation failed: {summary}", log=mapped)
    native.vet_includes("compile_cpp", native.depfile_entries((directory / "kernel.d").read_text()),
                        {directory / "kernel.cpp"}, directory)
    native.vet_objects("compile_cpp", [directory / "kernel.o"], "cpp")
    with guards.trusted():
        proc = subprocess.run([cxx, *flags, "kernel.o", "-o", "kernel.so"], cwd=directory, capture_output=True,
                              text=True, timeout=300)
    if proc.returncode != 0:
        raise CompileError(f"C++ link failed: {(proc.stderr.strip().splitlines() or ['unknown error'])[-1]}",
                           log=native.sanitize_compiler_log(proc.stderr, ("kernel.cpp",), ()))


def _mmap_threshold() -> int | None:
    """glibc's mmap threshold where it is fixed for this process (MALLOC_MMAP_THRESHOLD_, read by glibc at start),
    else None (glibc's own threshold moves with the blocks freed; another libc has other rules)."""
    if _pyplatform.libc_ver()[0] != "glibc":
        return None
    try:
        value = int(os.environ.get("MALLOC_MMAP_THRESHOLD_", ""))
    except ValueError:
        return None
    return value if value > 0 else None


_MMAP_THRESHOLD = _mmap_threshold()  # at import: before any guard watches what this process opens


class CpuPlatform(Platform):
    name = "cpu"
    title = "CPU (C++ / OpenMP)"
    kernel_language = "cpp"
    formats = ("ctypes", "load_inline")
    device_type = "cpu"
    has_profiler = True
    limit_address_space = True
    fork_server_safe = True
    synchronous_kernels = True
    candidate_api = ("compile_cpp",)
    module_name = "platforms.cpu"
    tiny_problem_ms = 0.02

    _flush_buffer = None

    def poison_allocations(self, sizes_bytes: list[int]) -> None:
        """Poison only what the heap can hand out again: a block at or above glibc's mmap threshold (fixed in every
        evaluation child: child_setup.MALLOC_MMAP_THRESHOLD) is a fresh mapping on every allocation, zero pages from
        the kernel, and is unmapped when freed, so poisoning one would never reach a later allocation and would only
        cost its size in memory (twice the outputs, at KernelBench's sizes gigabytes)."""
        limit = _MMAP_THRESHOLD
        super().poison_allocations([n for n in sizes_bytes if limit is None or n < limit])

    def availability(self) -> Availability:
        cxx = _compiler()
        if cxx is None:
            return Availability(False, "no C++ compiler found: install g++ (Debian: apt-get install g++) or set CXX")
        return Availability(True, f"{_compiler_version(cxx)}; {os.cpu_count()} cores")

    def device_name(self) -> str:
        return f"{_cpu_model()} ({os.cpu_count()} cores)"

    def prepare_child(self) -> None:
        from kforge_core.eval.harness import inline_cache

        inline_cache.install()

    def flush_cache(self) -> None:
        import torch

        if self._flush_buffer is None:
            self._flush_buffer = torch.empty(_llc_bytes() * 2 // 4, dtype=torch.float32)
        self._flush_buffer.fill_(1.0)  # writing 2x the last-level cache evicts the inputs

    def profile(self, run, trials: int = 5) -> dict:
        from kforge_core.profiling import summarize_torch_profile

        from torch.profiler import ProfilerActivity, profile

        from ._ctypes_kernels import profiling_active

        run()  # warm
        profiling_active[0] = True
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(trials):
                    run()
        finally:
            profiling_active[0] = False
        return summarize_torch_profile(prof, trials, tool="torch.profiler (CPU activities)", device="cpu")

    def measure_ceilings(self) -> dict:
        import statistics

        import torch

        n = 64 * 1024 * 1024  # 256 MiB of fp32: far beyond any CPU cache
        src, dst = torch.rand(n), torch.empty(n)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
        bw = 2 * n * 4 / statistics.median(times) / 1e9  # bytes read + bytes written
        a, b = torch.rand(1024, 1024), torch.rand(1024, 1024)
        a @ b
        mm = []
        for _ in range(5):
            t0 = time.perf_counter()
            a @ b
            mm.append(time.perf_counter() - t0)
        tflops = 2 * 1024 ** 3 / statistics.median(mm) / 1e12
        return {"bandwidth_gbs": round(bw, 2), "fp32_tflops": round(tflops, 4),
                "method": "256 MiB tensor copy (read+write); 1024^3 fp32 matmul; median of 5"}


def _llc_bytes() -> int:
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
            value = int(text.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
            best = max(best, value)
        except (OSError, ValueError):
            continue
    return min(max(best, 8 << 20), 256 << 20)


PLATFORM = CpuPlatform()
