"""Apple Metal target: Metal Shading Language kernels compiled at run time by `torch.mps.compile_shader`
(public since torch 2.7), launched on MPS tensors.

Written against the documented API and torch's source; it has not been run on a Mac by this project yet.
Needs macOS 14+ on Apple silicon, and torch >= 2.7 built with MPS.

Candidate format (`metal`):

    from platforms.metal import compile_metal

    lib = compile_metal(SOURCE)                       # compiled once per process per source (hash), errors mapped
    lib.swish_bias(x, bias, out, cols, threads=(cols, rows), group_size=(256, 1))

- Call argument i binds to the kernel's `[[buffer(i)]]` (buffer parameters numbered in order when no index is
  written): tensors for `device`/`constant` pointers, Python numbers for `constant T&` scalars (narrowed to the
  declared type automatically: `constant uint& n` gets a 32-bit value), short lists for small `constant` arrays.
- `threads=` is the total number of threads per dimension (1-3 dims, Metal `dispatchThreads`: the grid need not be
  a multiple of the group), `group_size=` the threads per threadgroup (same dims; at most
  `lib.k.max_threads_per_threadgroup`, best a multiple of `lib.k.thread_execution_width`, 32).
- Threadgroup memory is declared inside the kernel (`threadgroup float tile[256];`): compile_shader cannot size
  threadgroup parameters from Python.
- Every call is checked (MPS device, contiguity, dtype against the declared element type, argument count,
  dispatch shape) and counted as a launch.

Timing uses the base Timer: `time.perf_counter_ns` around the call, with `torch.mps.synchronize` (bound before the
candidate is imported) before both timestamps. MPS events were considered: their `elapsed_time` is also a host
clock (when an MTLSharedEvent listener is notified of completion), each `record()` ends kernel coalescing and
commits the command buffer, and `elapsed_time` itself does a full commit-and-wait — no more precise, and they
perturb the candidate's batching. Events are used where they help: per-launch attribution in `profile()` and the
ceilings in `measure_ceilings()`.

Baselines: eager MPS, and torch.compile (Inductor's Metal backend) where it compiles the problem; when it does not,
the harness reports "torch.compile baseline unavailable: ..." as a warning and times eager only.
"""

from __future__ import annotations

import contextlib
import functools
import platform as _pyplatform
import re
import subprocess
import sys
import time

from kforge_core.build_cache import digest
from kforge_core.errors import CompileError
from kforge_core.eval.harness import context, guards, launches
from kforge_core.platform import Availability, Platform, Timer
from kforge_core.source_map import source_start_line

from ._diagnostics import compile_error_details

MIN_TORCH = (2, 7)
MIN_MACOS = (14, 0)
FLUSH_BYTES = 256 << 20  # > the largest system-level cache of M-series parts (up to 96 MB on Max/Ultra)
MPS_UNAVAILABLE = "needs Apple MPS (torch.backends.mps.is_available() is False here)"
DEVICE_TYPE = "mps"  # tensors kernels accept; tests on machines without MPS swap in "cpu" with a fake compiler

_libraries: dict[str, MetalLibrary] = {}  # per process, by source hash


def _version_tuple(text: str, parts: int = 2) -> tuple[int, ...]:
    nums = [int(x) for x in re.findall(r"\d+", text.split("+")[0])[:parts]]
    return tuple(nums + [0] * (parts - len(nums)))


def assess(system: str, mac_version: str, machine: str, torch_version: str, has_compile_shader: bool,
           mps_built: bool, mps_available: bool, device: str = "") -> Availability:
    """The availability decision from plain facts, so every branch is testable on any machine."""
    if system != "darwin":
        return Availability(False, f"not macOS (this is {system}): the Metal target needs macOS "
                                   f"{MIN_MACOS[0]}+ on Apple silicon with torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}")
    if machine and machine != "arm64":
        return Availability(False, f"this Mac is {machine}: the Metal target supports Apple silicon (arm64) only")
    if mac_version and _version_tuple(mac_version) < MIN_MACOS:
        return Availability(False, f"macOS {mac_version} is too old: torch.mps.compile_shader needs macOS "
                                   f"{MIN_MACOS[0]}+ (Metal 3.1)")
    if not mps_built:
        return Availability(False, f"torch {torch_version} was built without MPS "
                                   f"(torch.backends.mps.is_built() is False): install the macOS arm64 wheel")
    if _version_tuple(torch_version) < MIN_TORCH or not has_compile_shader:
        return Availability(False, f"torch {torch_version} has no torch.mps.compile_shader: upgrade to torch >= "
                                   f"{MIN_TORCH[0]}.{MIN_TORCH[1]}")
    if not mps_available:
        return Availability(False, "torch.backends.mps.is_available() is False: no usable Metal device "
                                   "(a VM without GPU access, or macOS too old for this torch)")
    where = f"{device}; " if device else ""
    return Availability(True, f"{where}macOS {mac_version}; torch {torch_version}")


@functools.lru_cache(maxsize=None)
def _sysctl(name: str) -> str:
    try:
        with guards.trusted():
            out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.lru_cache(maxsize=None)
def _gpu_name() -> str:
    import torch

    name = ""
    get_name = getattr(torch._C, "_mps_get_name", None)  # platform code only; not part of any candidate API
    get_cores = getattr(torch._C, "_mps_get_core_count", None)
    try:
        if get_name is not None and torch.backends.mps.is_available():
            name = str(get_name())
            if get_cores is not None:
                name = f"{name} ({int(get_cores())} GPU cores)"
    except Exception:  # noqa: BLE001 - the name is cosmetic
        name = ""
    return name or _sysctl("machdep.cpu.brand_string") or "Apple GPU (MPS)"


@functools.lru_cache(maxsize=None)
def _mps_ready() -> Availability:
    return PLATFORM.availability()


def compile_metal(source: str) -> MetalLibrary:
    """Compile Metal Shading Language `source` with torch.mps.compile_shader and return its kernels as checked,
    counted callables (`lib.name(*args, threads=..., group_size=...)`). Compiled once per process per source.

    Raises CompileError with the Metal compiler's diagnostics mapped to the candidate's own line numbers.
    """
    # imported here: discovering platforms must not import torch (the signature tables hold torch dtypes)
    from ._kernels import MetalLibrary
    from ._signatures import MetalSignatureError, parse_kernels

    if not isinstance(source, str):
        raise CompileError(f"compile_metal takes the Metal source as a str, got {type(source).__name__}")
    start_line = source_start_line(source, context.candidate_text)
    for i, line in enumerate(source.splitlines(), start=1):
        bad = next((ch for ch in line if ord(ch) > 127), None)
        if bad is not None:
            where = f"candidate line {start_line + i - 1}" if start_line else f"kernel line {i}"
            raise CompileError(f"{where}: Metal source must be ASCII (torch hands it to the compiler as ASCII); "
                               f"found {bad!r} — use plain quotes and names, also in comments")
    try:
        signatures = parse_kernels(source)
    except MetalSignatureError as e:
        k = e.kernel_line
        where = (f"candidate line {start_line + k - 1}: " if (start_line and k) else
                 (f"kernel line {k}: " if k else ""))
        raise CompileError(f"{where}{e}") from None
    key = digest(source)
    cached = _libraries.get(key)
    if cached is not None:
        launches.record_build("metal", key, True, 0.0)
        return cached
    avail = _mps_ready()
    if not avail.ok:
        raise CompileError(f"cannot compile Metal kernels here: {avail.reason}")
    import torch

    start = time.perf_counter()
    try:
        with guards.trusted():  # the Metal compiler runs in a system service; our own code, not the candidate's
            native = torch.mps.compile_shader(source)
    except (SyntaxError, RuntimeError) as e:
        message = (e.msg if isinstance(e, SyntaxError) else None) or str(e)
        summary, log = compile_error_details(message, source, start_line)
        raise CompileError(f"Metal compilation failed: {summary}", log=log) from None
    lib = MetalLibrary(native, signatures, key, cached=False, build_s=0.0, device_type=DEVICE_TYPE)
    for name in signatures:  # pipeline states are built now, so their errors are build errors
        try:
            lib.kernel(name)
        except AttributeError as e:
            raise CompileError(f"Metal kernel {name!r} could not be turned into a pipeline: {e}") from None
    lib.build_s = time.perf_counter() - start
    launches.record_build("metal", key, False, lib.build_s)
    _libraries[key] = lib
    return lib


def _median_event_ms(fn, reps: int = 5) -> float:
    import statistics

    import torch

    fn()
    torch.mps.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.mps.event.Event(enable_timing=True), torch.mps.event.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


class MetalPlatform(Platform):
    name = "metal"
    title = "Apple Metal (MPS)"
    # Pygments has no Metal Shading Language lexer; MSL is a C++ dialect, so the C++ lexer is the honest fallback
    # (attributes like [[buffer(0)]] and address spaces like `device` are shown as plain C++ tokens).
    kernel_language = "cpp"
    formats = ("metal",)
    device_type = "mps"
    has_profiler = True
    accepts_profiler_screenshots = True  # Xcode Instruments (Metal System Trace, os_signpost), GPU captures
    limit_address_space = False  # the Metal driver maps large virtual ranges
    candidate_api = ("compile_metal",)
    module_name = "platforms.metal"
    strict_fp32_controls = False  # MPS matmuls have no TF32 mode
    allows_inline_asm = False
    tiny_problem_ms = 0.05  # one MPS command buffer round trip is tens of microseconds

    _flush_buffer = None

    def availability(self) -> Availability:
        try:
            import torch
        except ImportError as e:
            return Availability(False, f"torch is not importable: {e}")
        mps = getattr(torch.backends, "mps", None)
        built = bool(mps and mps.is_built())
        available = bool(built and mps.is_available())
        has_cs = hasattr(getattr(torch, "mps", None), "compile_shader")
        mac_version = _pyplatform.mac_ver()[0] if sys.platform == "darwin" else ""
        device = _gpu_name() if available else ""
        return assess(sys.platform, mac_version, _pyplatform.machine() if sys.platform == "darwin" else "",
                      torch.__version__, has_cs, built, available, device)

    def device_name(self) -> str:
        if sys.platform != "darwin":
            return "Apple GPU (MPS; not present on this machine)"
        return _gpu_name()

    # --- evaluation child --------------------------------------------------------------------------------------
    def synchronize(self) -> None:
        import torch

        torch.mps.synchronize()

    def make_timer(self) -> Timer:
        import torch

        return Timer(torch.mps.synchronize)  # the function object is bound now, before any candidate code runs

    def flush_cache(self) -> None:
        import torch

        if self._flush_buffer is None:
            self._flush_buffer = torch.ones(FLUSH_BYTES // 4, dtype=torch.float32, device="mps")
        self._flush_buffer.neg_()  # reads and writes 256 MiB: evicts the inputs from the SLC; not synchronized here

    def profile(self, run, trials: int = 5) -> dict:
        import torch

        from ._profile import recording, summarize_mps_profile

        sync = torch.mps.synchronize
        run()
        sync()
        clean = []
        for _ in range(trials):
            sync()
            t0 = time.perf_counter_ns()
            run()
            sync()
            clean.append((time.perf_counter_ns() - t0) / 1e6)
        forward = []
        signposts = True
        with contextlib.ExitStack() as stack:
            try:  # os_signposts for Instruments; wait_until_completed=False keeps the candidate's batching
                stack.enter_context(torch.mps.profiler.profile(mode="interval", wait_until_completed=False))
            except Exception:  # noqa: BLE001 - signposts are an extra; the event timings do not need them
                signposts = False
            rec = stack.enter_context(recording())
            for _ in range(trials):
                sync()
                t0 = time.perf_counter_ns()
                run()
                sync()
                forward.append((time.perf_counter_ns() - t0) / 1e6)
        sync()
        kernel_ms = rec.kernel_ms()
        return summarize_mps_profile(kernel_ms, forward, trials, device=self.device_name(), clean_forward_ms=clean,
                                     torch_ops=_count_torch_ops(run), signposts=signposts)

    def measure_ceilings(self) -> dict:
        import torch

        n = FLUSH_BYTES // 4  # 256 MiB of fp32 per tensor: far beyond the SLC
        src = torch.rand(n, device="mps")
        dst = torch.empty_like(src)
        copy_ms = _median_event_ms(lambda: dst.copy_(src))
        bw = 2 * n * 4 / (copy_ms / 1e3) / 1e9  # bytes read + bytes written
        del src, dst
        out = {"bandwidth_gbs": round(bw, 2)}
        m = 4096
        for dtype, key in ((torch.float32, "fp32_tflops"), (torch.float16, "fp16_tflops")):
            a = torch.rand(m, m, device="mps", dtype=dtype)
            b = torch.rand(m, m, device="mps", dtype=dtype)
            mm_ms = _median_event_ms(lambda: a @ b)
            out[key] = round(2 * m ** 3 / (mm_ms / 1e3) / 1e12, 3)
        out["method"] = ("256 MiB MPS tensor copy (read+write); 4096^3 fp32 and fp16 matmuls; "
                         "median of 5, torch.mps.event timings")
        return out


def _count_torch_ops(run) -> dict[str, float]:
    """aten ops one forward dispatches (CPU-side view; MPS gives torch no per-op GPU time), allocation and view
    ops left out. Best effort: {} when the dispatch mode is unavailable."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return {}
    skip = {"empty", "empty_like", "empty_strided", "view", "detach", "alias", "as_strided", "reshape",
            "_unsafe_view", "t", "expand", "unsqueeze", "squeeze", "permute", "transpose", "slice", "select",
            "lift_fresh", "contiguous"}
    counts: dict[str, float] = {}

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name not in skip:
                key = f"aten::{name}"
                counts[key] = counts.get(key, 0) + 1
            return func(*args, **(kwargs or {}))

    try:
        with Counter():
            run()
    except Exception:  # noqa: BLE001 - op counts are a hint, never a reason to lose the profile
        return {}
    return counts


PLATFORM = MetalPlatform()
