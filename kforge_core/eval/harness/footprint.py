"""The evaluation's memory, inside the child: what the problem's own tensors take, whether an evaluation of it can
fit on this device before it starts, the peak each phase reached, and giving cached memory back between phases (the
device's caching allocator's; on the host, glibc's free heap, which is not trimmed while a phase runs:
child_setup.MALLOC_TRIM_THRESHOLD).

The protocol's bound, besides the two models' parameters (the reference's and the candidate's copy) and the
reference's own working memory: the inputs twice and the outputs twice (the reference's determinism check), or the
inputs once and the outputs three times (a checked call: the reference's outputs, the candidate's, and the
poisoning of fresh memory; a timed trial: candidate, eager and torch.compile outputs). See correctness.py.

Peaks: on CUDA the caching allocator's own count (torch.cuda.max_memory_allocated) and what it reserved from the
device (torch.cuda.max_memory_reserved: allocated plus its cached free blocks, the part of a process's device memory
that nvidia-smi shows besides the CUDA context); on the CPU the process's peak resident set (VmHWM, reset per phase
through /proc/self/clear_refs where the kernel allows it). The judge keeps its own (`Phases`); the candidate's process
keeps the same per phase (`harness.worker`, phases named by the judge's requests) and reports them when the judge
asks, as its own account (`harness.memory_account.candidate_memory`: validated, labelled, never used for a verdict).
"""

from __future__ import annotations

import ctypes
import resource
import sys
from dataclasses import asdict, dataclass

import torch

from . import guards
from .loading import tensor_bytes

GiB = float(1 << 30)


@dataclass
class Sizes:
    inputs: int = 0  # one set of the problem's inputs
    params: int = 0  # the reference model's parameters and buffers
    outputs: int = 0  # one set of the reference's outputs
    work: int = 0  # the reference's working memory: what one forward allocated beyond what it returned

    @property
    def live(self) -> int:
        """The problem's own tensors: its inputs, parameters and outputs, once each."""
        return self.inputs + self.params + self.outputs

    def needed(self) -> int:
        return 2 * self.params + max(2 * self.inputs + 2 * self.outputs, self.inputs + 3 * self.outputs) + self.work

    def describe(self) -> str:
        return (f"inputs {self.inputs / GiB:.3g} GiB, parameters {self.params / GiB:.3g} GiB, outputs "
                f"{self.outputs / GiB:.3g} GiB, the reference's working memory {self.work / GiB:.3g} GiB")


def model_bytes(model) -> int:
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = (t.untyped_storage().data_ptr(), t.device)
        if key not in seen:
            seen.add(key)
            total += tensor_bytes(t)
    return total


def _cuda(platform) -> bool:
    return platform.device_type == "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized()


def _status_bytes(field: str) -> int:
    try:
        with guards.trusted(), open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def current(platform) -> int:
    """Memory held now: device memory allocated by torch (CUDA), the resident set otherwise."""
    return torch.cuda.memory_allocated() if _cuda(platform) else _status_bytes("VmRSS")


def reset_peak(platform) -> None:
    if _cuda(platform):
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        with guards.trusted(), open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # resets VmHWM to the current resident set
    except OSError:
        pass  # then the peak counts from the start of the process


def peak(platform) -> int:
    return torch.cuda.max_memory_allocated() if _cuda(platform) else _status_bytes("VmHWM")


def reserved(platform) -> int | None:
    """Device memory the caching allocator holds now, its free cached blocks included (CUDA); None elsewhere."""
    return torch.cuda.memory_reserved() if _cuda(platform) else None


def peak_reserved(platform) -> int | None:
    """The caching allocator's peak reservation since the last reset (CUDA); None elsewhere."""
    return torch.cuda.max_memory_reserved() if _cuda(platform) else None


def measure(platform) -> str:
    return "torch.cuda.max_memory_allocated" if _cuda(platform) else "VmHWM (peak RSS)"


def available(platform, held: int) -> tuple[int, int] | None:
    """(bytes this evaluation could hold in all, the device's total), where known. `held`: what the evaluation's
    own tensors take now (counted as available: they are part of what the bound needs)."""
    if _cuda(platform):
        free, total = torch.cuda.mem_get_info()
        return free + torch.cuda.memory_reserved(), total
    if platform.device_type != "cpu":
        return None
    mem_available = total = 0
    try:
        with guards.trusted(), open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    mem_available = int(line.split()[1]) * 1024
                elif line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    room = mem_available
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:  # the evaluation's memory limit (address space)
        room = min(room, soft - _status_bytes("VmSize"))
        total = min(total, soft)
    return max(room, 0) + held, total


def does_not_fit(sizes: Sizes, platform, held: int) -> str:
    """Why an evaluation of this problem cannot fit here (the numbers), or ''."""
    room = available(platform, held)
    if room is None or sizes.needed() <= room[0]:
        return ""
    return (f"the problem does not fit in this device's memory: evaluating it needs about "
            f"{sizes.needed() / GiB:.3g} GiB ({sizes.describe()}; the evaluation holds at most the inputs twice and "
            f"the outputs twice, or the inputs once and the outputs three times, and both models' parameters), and "
            f"{room[0] / GiB:.3g} GiB of {room[1] / GiB:.3g} GiB is available")


def ran_out(what: str, e: BaseException, platform) -> str:
    """The problem error for an out-of-memory before the candidate ran: what ran out, what is available."""
    room = available(platform, current(platform))
    text = str(e).strip().splitlines()
    return (f"the problem does not fit in this device's memory: {what} ran out of memory"
            + (f" ({room[0] / GiB:.3g} GiB of {room[1] / GiB:.3g} GiB available)" if room else "")
            + f": {type(e).__name__}: {text[0][:300] if text else ''}")


def out_of_memory(e: BaseException) -> bool:
    return isinstance(e, (MemoryError, torch.cuda.OutOfMemoryError)) or any(
        s in str(e) for s in ("out of memory", "Cannot allocate memory", "can't allocate memory"))


def _malloc_trim():
    """glibc's malloc_trim, looked up before any candidate code exists; None elsewhere (musl, macOS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def release(platform) -> None:
    """Give cached, unused memory back between phases, so the next phase's different sizes can use it: the device's
    cache, and the host heap's free memory (kept while a phase runs, so that timed calls reuse it)."""
    if _cuda(platform):
        platform.synchronize()
        torch.cuda.empty_cache()
    if _MALLOC_TRIM is not None:
        with guards.trusted():
            _MALLOC_TRIM(0)


def hold_long_lived(platform) -> None:
    """Make the buffers a process keeps for its whole life (the fingerprint's weights, the cache-flush buffer) before
    anything of the problem's size exists. Made later, each took its tens of MiB from a split of a freed
    problem-sized block of CUDA's caching allocator, and that block, pinned by them, could then neither hold the next
    tensor of its size (a new one was reserved) nor be given back by `release`: gigabytes a process at KernelBench's
    sizes. On the CPU the same two cost ~50 ms (the weights' random numbers) and ~40 ms (the flush buffer's first
    touch, page faults) on the 2-core box: a pre-started child makes them while nobody waits (`zygote`)."""
    if platform.device_type not in ("cpu", "cuda") or platform.device_type == "cuda" and not torch.cuda.is_available():
        return
    if platform.name in _held:  # made while a pre-started child waited: not again on its request
        return
    from .compare import hold_weights

    hold_weights(platform.device())
    platform.flush_cache()
    _held.add(platform.name)


_held: set[str] = set()  # the platforms (each its own flush buffer) whose life-long buffers this process holds


class Phases:
    """The peak of each phase of the evaluation, for the verdict's `memory` report and bench/eval_footprint.py.
    `held`: also what the process still held when each phase ended (what the next phase started with: on CUDA
    allocated and reserved), which the candidate's process reports (`harness.worker`)."""

    def __init__(self, platform, held: bool = False):
        self.platform = platform
        self.start = current(platform)
        self.sizes = Sizes()
        self.peaks: dict[str, int] = {}
        self.reserved: dict[str, int] = {}  # CUDA: the caching allocator's peak reservation per phase
        self.held: dict[str, int] | None = {} if held else None
        self.held_reserved: dict[str, int] = {}
        self._name: str | None = None

    @property
    def name(self) -> str | None:
        return self._name

    def enter(self, name: str) -> None:
        self.leave()
        reset_peak(self.platform)
        self._name = name

    def leave(self) -> None:
        if self._name is not None:
            name, self._name = self._name, None
            self.peaks[name] = max(self.peaks.get(name, 0), peak(self.platform))
            top = peak_reserved(self.platform)
            if top is not None:
                self.reserved[name] = max(self.reserved.get(name, 0), top)
            if self.held is not None:
                self.held[name] = current(self.platform)
                now = reserved(self.platform)
                if now is not None:
                    self.held_reserved[name] = now

    def peaks_report(self) -> dict:
        """The per-phase numbers alone (closing the phase that is open)."""
        self.leave()
        out = {"start_bytes": self.start, "peak_bytes": dict(self.peaks)}
        if self.reserved:
            out["peak_reserved_bytes"] = dict(self.reserved)
        if self.held is not None:
            out["held_bytes"] = dict(self.held)
            if self.held_reserved:
                out["held_reserved_bytes"] = dict(self.held_reserved)
        return out

    def report(self) -> dict:
        return {"sizes": asdict(self.sizes), "live_bytes": self.sizes.live, "needed_bytes": self.sizes.needed(),
                **self.peaks_report(), "measure": measure(self.platform)}
