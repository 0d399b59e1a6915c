"""Benchmark figures, KernelBench-style.

fast_p: the share of ALL problems that were solved correctly AND ran more than p times faster than the baseline
(fast_0 is the correctness rate). Geometric-mean speedup is reported two ways, each labelled: with failures counted
as 1.0 (the agent leaves the problem as it was) and with failures excluded (over correct problems only). A correct
problem whose best program is slower than a baseline is counted apart (`correct_slower_than_*`): it is correct, its
measured speedup (below 1) enters the means as it is, and it is never a gain.

Records say which device each problem ran on. When a bench spans several kinds of device (a cluster of mixed
GPUs), its overall figures mix them: the summary then names the devices (`mixed_devices`) and gives each its own
figures (`per_device`), and every view of the summary says so next to the overall numbers.
"""

from __future__ import annotations

import math
import statistics

P_VALUES = (0.0, 1.0, 1.2, 1.5, 2.0)
BASELINES = ("eager", "compiled")


def _speedup(record: dict, baseline: str) -> float | None:
    value = record.get(f"speedup_vs_{baseline}")
    return value if isinstance(value, (int, float)) and value > 0 and math.isfinite(value) else None


def slower_than(records: list[dict], baseline: str) -> int:
    """Correct problems whose best program is slower than `baseline` (its measured speedup below 1)."""
    return sum(1 for r in records if r.get("correct") and (s := _speedup(r, baseline)) is not None and s < 1.0)


def fast_p(records: list[dict], p: float, baseline: str) -> float | None:
    if not records:
        return None
    hits = sum(1 for r in records if r.get("correct") and (s := _speedup(r, baseline)) is not None and s > p) \
        if p > 0 else sum(1 for r in records if r.get("correct"))
    return hits / len(records)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(records: list[dict]) -> dict:
    n = len(records)
    correct = [r for r in records if r.get("correct")]
    out: dict = {"problems": n, "correct": len(correct), "correctness_rate": len(correct) / n if n else None,
                 **{f"correct_slower_than_{b}": slower_than(records, b) for b in BASELINES}}
    for b in BASELINES:
        speeds = [_speedup(r, b) for r in correct]
        known = [s for s in speeds if s is not None]
        out[f"fast_p_vs_{b}"] = {f"{p:g}": fast_p(records, p, b) for p in P_VALUES}
        out[f"geomean_speedup_vs_{b}_failures_as_1"] = geomean(
            [(_speedup(r, b) or 1.0) if r.get("correct") else 1.0 for r in records])
        out[f"geomean_speedup_vs_{b}_correct_only"] = geomean(known)
        out[f"median_speedup_vs_{b}_correct_only"] = statistics.median(known) if known else None
    levels = sorted({r.get("level") for r in records if r.get("level") is not None})
    out["per_level"] = {str(lv): summarize_level([r for r in records if r.get("level") == lv]) for lv in levels}
    devices = sorted({r["device"] for r in records if r.get("device")})
    out["devices"] = devices
    if len(devices) > 1:
        out["mixed_devices"] = devices
        out["per_device"] = {d: summarize_level([r for r in records if r.get("device") == d]) for d in devices}
    return out


def mixed_devices_note(devices: list[str]) -> str:
    return (f"these results come from {len(devices)} kinds of device ({'; '.join(devices)}): the overall fast_p "
            f"and geometric means mix them; see the per-device figures")


def summarize_level(records: list[dict]) -> dict:
    correct = [r for r in records if r.get("correct")]
    return {
        "problems": len(records), "correct": len(correct),
        **{f"correct_slower_than_{b}": slower_than(records, b) for b in BASELINES},
        **{f"fast_1_vs_{b}": fast_p(records, 1.0, b) for b in BASELINES},
        **{f"geomean_speedup_vs_{b}_failures_as_1": geomean(
            [(_speedup(r, b) or 1.0) if r.get("correct") else 1.0 for r in records]) for b in BASELINES},
    }
