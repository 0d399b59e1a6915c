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


def total() -> int:
    return sum(_counts.values())


def snapshot() -> dict[str, int]:
    return dict(_counts)


builds: list[dict] = []


def record_build(platform: str, key: str, cached: bool, seconds: float) -> None:
    builds.append({"platform": platform, "key": key, "cached": cached, "seconds": seconds})
