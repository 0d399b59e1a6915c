"""Whether two benches of the same suite reached the same verdicts (e.g. the local executor and Ray, or 1 GPU
and 8): per problem the run's status, correctness and iteration count. Timings are not compared; they differ
from run to run."""

from __future__ import annotations

VERDICT_FIELDS = ("status", "correct", "iterations")


def verdicts(records: list[dict]) -> dict[str, tuple]:
    return {r["problem"]: tuple(r.get(k) for k in VERDICT_FIELDS) for r in records}


def same_verdicts(a: list[dict], b: list[dict]) -> tuple[bool, str]:
    """(True, "") when both hold the same problems with the same verdicts; else (False, the differences)."""
    va, vb = verdicts(a), verdicts(b)
    diffs = [f"{p}: {va.get(p)} vs {vb.get(p)}" for p in sorted(set(va) | set(vb)) if va.get(p) != vb.get(p)]
    return not diffs, "; ".join(diffs[:10]) + (f" (+{len(diffs) - 10} more)" if len(diffs) > 10 else "")
