"""The platform interface and its registry.

A target (CPU, CUDA, Triton, Metal, ...) is one module that defines a `Platform` subclass and exposes an instance as
`PLATFORM`, plus a single-shot example under `platforms/examples/<name>/`. Built-in targets are discovered by scanning
the `platforms` package; third-party ones register through the `kforge.platforms` entry-point group or the
`KFORGE_PLATFORMS` environment variable (comma-separated module names) — exactly the same path as the built-ins.
The core reads declared attributes; it never branches on a platform's name.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

from .errors import KForgeError, TargetUnavailable, UnknownTarget

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = REPO_ROOT / "platforms" / "examples"


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str  # why it is unavailable, or what was found ("2 cores, g++ 12.2")


@dataclass(frozen=True)
class Example:
    """The platform's single-shot example: a reference problem and a working candidate in the platform's format."""

    problem: Path
    candidate: Path

    def read(self) -> tuple[str, str]:
        return self.problem.read_text(), self.candidate.read_text()


class TimingIntegrityError(RuntimeError):
    """A timer found its own measurement unsound (e.g. the end timestamp taken before the work completed)."""


class Timer:
    """Times one call of `fn` in milliseconds, including a device-wide synchronize before the end timestamp.

    Instances are made before any candidate code is imported, and bind the clock functions then, so a candidate that
    patches `time.perf_counter` or event classes afterwards cannot change what is measured.
    """

    def __init__(self, synchronize: Callable[[], None]):
        import time

        self._clock = time.perf_counter_ns  # bound now, not looked up at call time
        self._sync = synchronize

    def time_ms(self, fn: Callable[[], object]) -> float:
        self._sync()
        t0 = self._clock()
        fn()
        self._sync()
        return (self._clock() - t0) / 1e6


@dataclass(frozen=True)
class TargetSpec:
    """A target as the agents see it, resolved once from its platform and passed on by value (the loop resolves it
    when a run starts; generation and analysis requests carry it; the built-in compiler picks its writer from it)."""

    name: str  # the --target value
    title: str
    device_type: str
    module: str  # the importable module candidates use, e.g. "platforms.cpu"
    candidate_api: tuple[str, ...]
    formats: tuple[str, ...]
    kernel_language: str
    example_problem: str = ""  # the single-shot example's text
    example_candidate: str = ""


class Platform:
    # --- declared attributes (capabilities); subclasses override ---
    name: str = ""
    title: str = ""
    kernel_language: str = "cpp"  # pygments lexer name for the kernel source
    formats: tuple[str, ...] = ()
    device_type: str = "cpu"
    has_profiler: bool = False
    # a kernel call returns when its work is done (CPU): the time inside the call is the kernel's, so the share of
    # a forward spent in the candidate's own kernels is measured on every call; otherwise it comes from a profile
    synchronous_kernels: bool = False
    profiler_times_device: bool = False  # the profile's per-forward time is device (kernel) time, not host time
    accepts_profiler_screenshots: bool = False
    limit_address_space: bool = False  # RLIMIT_AS is safe only where the runtime does not map huge VA ranges
    candidate_api: tuple[str, ...] = ()  # names candidates may import from this platform's module
    module_name: str = ""  # the importable module candidates use, e.g. "platforms.cpu"
    # fp32 matmuls on this device may silently use reduced precision (TF32): the harness pins strict fp32
    strict_fp32_controls: bool = False
    allows_inline_asm: bool = False  # GPU kernels may use inline PTX; host inline assembly could make syscalls
    tiny_problem_ms: float = 0.02  # below this a reference mostly measures call overhead: warn
    # Children may be forked from the evaluation fork server (torch preloaded): where the device runtime can be
    # initialised in a forked child as long as the server never touched it (CPU; CUDA and Triton, whose fork server
    # is checked never to have initialised the driver: harness.zygote.device_touched). Not on macOS (its frameworks
    # are not fork-safe). Everything else is spawned.
    fork_server_safe: bool = False

    # --- discovery-time queries (run in the caller's process; must not run candidate code) ---
    def availability(self) -> Availability:
        raise NotImplementedError

    def device_name(self) -> str:
        return self.device_type

    def device_count(self) -> int:
        """How many devices of this kind can run evaluations side by side (benchmarks use one worker each)."""
        return 1

    def example(self) -> Example:
        d = EXAMPLES_DIR / self.name
        return Example(problem=d / "problem.py", candidate=d / "candidate.py")

    def spec(self) -> TargetSpec:
        """This target as a value for the agents (its single-shot example read from disk)."""
        example_problem, example_candidate = self.example().read()
        return TargetSpec(name=self.name, title=self.title or self.name, device_type=self.device_type,
                          module=self.module_name or f"platforms.{self.name}", candidate_api=tuple(self.candidate_api),
                          formats=tuple(self.formats), kernel_language=self.kernel_language,
                          example_problem=example_problem, example_candidate=example_candidate)

    # --- used inside the evaluation child only ---
    def device(self):
        import torch

        return torch.device(self.device_type)

    def prepare_child(self) -> None:
        """Install build caching / launch tracking before the candidate is imported."""

    def warm_child(self) -> None:
        """In a pre-started evaluation child (`kforge_core.eval.warm_pool`), isolated, before it has a request: the
        trusted start-up work every evaluation would do first (a device context), done while nobody waits."""

    def synchronize(self) -> None:
        """Wait for all work on the device, on every stream."""

    def make_timer(self) -> Timer:
        return Timer(self.synchronize)

    def flush_cache(self) -> None:
        """Evict caches outside the timed region so each trial reads its inputs from memory."""

    def cache_bytes(self) -> int | None:
        """The size of the device's last-level cache, where known (inside the evaluation child)."""
        return None

    def poison_allocations(self, sizes_bytes: list[int]) -> None:
        """Make freshly allocated memory of these sizes hold NaN, so unwritten outputs cannot pass."""
        import torch

        keep = []
        for n in sizes_bytes:
            numel = max(1, (n + 3) // 4)
            keep.append(torch.full((numel,), float("nan"), dtype=torch.float32, device=self.device()))
        self.synchronize()
        del keep

    def profile(self, run: Callable[[], object], trials: int = 5) -> dict:
        raise NotImplementedError(f"platform {self.name} has no profiler adapter")

    def custom_share(self, run: Callable[[], object]) -> float | None:
        """The share of a forward's profiled time spent in the candidate's own kernels, measured for every verdict
        on targets whose kernel calls return before the work is done: a short profile, nothing more."""
        return self.profile(run, trials=3).get("custom_share")

    def measure_ceilings(self) -> dict:
        return {}

    def seed(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------------------------
# Registry

_registry: dict[str, Platform] = {}
_discovered = False
_discovery_lock = threading.Lock()


def register_platform(platform: Platform) -> Platform:
    if not platform.name:
        raise KForgeError(f"platform {platform!r} has no name")
    _registry[platform.name] = platform
    return platform


def _register_module(module_name: str) -> None:
    module = importlib.import_module(module_name)
    platform = getattr(module, "PLATFORM", None)
    if isinstance(platform, Platform):
        if not platform.module_name:
            platform.module_name = module_name
        register_platform(platform)


def discover() -> None:
    """Register built-ins (every module in the `platforms` package), entry points, and KFORGE_PLATFORMS modules."""
    global _discovered
    if _discovered:
        return
    with _discovery_lock:  # threads asking at once wait for one complete discovery, never see a partial registry
        if _discovered:
            return
        import platforms as builtin

        for info in pkgutil.iter_modules(builtin.__path__):
            if not info.name.startswith("_") and info.name != "examples":
                _register_module(f"{builtin.__name__}.{info.name}")
        for ep in metadata.entry_points(group="kforge.platforms"):
            _register_module(ep.module)
        for name in filter(None, (s.strip() for s in os.environ.get("KFORGE_PLATFORMS", "").split(","))):
            _register_module(name)
        _discovered = True


def all_platforms() -> dict[str, Platform]:
    discover()
    return dict(sorted(_registry.items()))


def get_platform(name: str, require_available: bool = False) -> Platform:
    platforms = all_platforms()
    if name not in platforms:
        raise UnknownTarget(name, list(platforms))
    platform = platforms[name]
    if require_available:
        avail = platform.availability()
        if not avail.ok:
            raise TargetUnavailable(name, avail.reason)
    return platform

