"""Counts launches of kernels the candidate compiled, so a pure-PyTorch `ModelNew` can be rejected.

Compile helpers (ctypes libraries, NVRTC modules, load_inline modules, Triton kernels) call `record(name)` on every
launch. The evaluator resets the counter around each checked forward call.
"""

from __future__ import annotations

from collections import Counter

_counts: Counter[str] = Counter()


def record(name: str) -> None:
    _counts[name] += 1


def reset() -> None:
    _counts.clear()
    _touched.clear()


# Memory (address, bytes) of tensors that compiled kernels were handed or returned, for the evaluator's check that
# ModelNew's outputs come from its kernels (see correctness.py). Helpers that do not report it are not judged by it.
_touched: list[tuple[int, int]] = []


def touch(tensor) -> None:
    try:
        _touched.append((tensor.data_ptr(), tensor.numel() * tensor.element_size()))
    except (AttributeError, RuntimeError, TypeError):
        pass


def touched() -> list[tuple[int, int]]:
    return list(_touched)


def total() -> int:
    return sum(_counts.values())


def snapshot() -> dict[str, int]:
    return dict(_counts)


# Nanoseconds spent inside calls of compiled kernels, never reset (callers read differences): on a target whose kernels
# are synchronous this is the candidate's own work, the numerator of the custom-kernel share.
_kernel_ns = [0]


def add_kernel_time(ns: int) -> None:
    _kernel_ns[0] += ns


def kernel_ns() -> int:
    return _kernel_ns[0]


builds: list[dict] = []


def record_build(platform: str, key: str, cached: bool, seconds: float) -> None:
    # a cache hit loads the published build: the compiler did not run
    builds.append({"platform": platform, "key": key, "cached": cached, "compiler_ran": not cached,
                   "seconds": seconds})


def merge(counts: dict[str, int], kernel_ns: int, outputs: list, from_kernels: bool | None) -> None:
    """Records of a call made in the candidate's process (`harness.remote`), entered here as if it had run in this
    one: launch counts, time inside its kernels, and whether its outputs came from its kernels (as spans over the
    judge's own copies of those outputs, or a span they cannot overlap)."""
    _counts.update({str(k): int(v) for k, v in counts.items()})
    _kernel_ns[0] += max(0, kernel_ns)
    if from_kernels is True:
        for t in outputs:
            touch(t)
    elif from_kernels is False:
        _touched.append((0, 0))
