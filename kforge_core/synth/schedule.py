"""The optimization state of a built-in candidate (which moves are applied), and the move catalogue.

A candidate carries its schedule in a marker comment (`# kforge-builtin: {...}`), so the analysis agent knows what
was already done and the generator can apply one more move on top of a previous program.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields

LABEL = "built-in, rule-based (no LLM)"
MARKER = "# kforge-builtin: "

# move id -> schedule flag it turns on
MOVE_FLAGS = {
    "fuse": "fuse",
    "parallelize_rows": "parallel",
    "vectorize": "vectorize",
    "block_shape": "block",
    "unroll": "unroll",
    "warp_reduce": "warp_reduce",
}
CATALOGUE = tuple(MOVE_FLAGS)

# the order the generator falls back to when no (usable) recommendation is given
CPU_ORDER = ("fuse", "parallelize_rows", "vectorize", "block_shape", "unroll")
GPU_ORDER = ("fuse", "parallelize_rows", "warp_reduce", "vectorize", "block_shape", "unroll")

MOVE_TITLES = {
    "fuse": "Fuse the separate kernels into one pass",
    "parallelize_rows": "Parallelize across rows",
    "vectorize": "Vectorize the inner loops",
    "block_shape": "Change the block / chunk shape",
    "unroll": "Unroll the inner loops",
    "warp_reduce": "Use warp-level reductions",
}


@dataclass
class Schedule:
    fuse: bool = False
    parallel: bool = False
    vectorize: bool = False
    block: bool = False
    unroll: bool = False
    warp_reduce: bool = False
    conservative: bool = False  # reductions stay in PyTorch (after a failed candidate)

    def with_move(self, move: str) -> "Schedule":
        d = asdict(self)
        d[MOVE_FLAGS[move]] = True
        return Schedule(**d)

    def applied(self, move: str) -> bool:
        return bool(getattr(self, MOVE_FLAGS[move]))

    def moves(self) -> list[str]:
        return [m for m in CATALOGUE if self.applied(m)]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Schedule":
        names = {f.name for f in fields(cls)}
        return cls(**{k: bool(v) for k, v in (d or {}).items() if k in names})


def first_schedule(target: str) -> Schedule:
    """The schedule of a problem's first (plain) program. On CUDA its row kernels already take a block a row: a thread
    a row left a GPU nearly idle on KernelBench's few long rows (softmax 30x slower than eager; a loss reduced to one
    value by a single thread did not finish a call in minutes), which cost the functional pass most of its time."""
    return Schedule(parallel=True) if target == "cuda" else Schedule()


def order_for(device_type: str) -> tuple[str, ...]:
    return CPU_ORDER if device_type == "cpu" else GPU_ORDER


def marker_line(info: dict) -> str:
    return MARKER + json.dumps(info, sort_keys=True)


def read_marker(program: str | None) -> dict | None:
    if not program:
        return None
    m = re.search(r"^# kforge-builtin: (\{.*\})\s*$", program, flags=re.M)
    if not m:
        return None
    try:
        return json.loads(m.group(1))
    except ValueError:
        return None
