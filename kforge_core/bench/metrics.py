"""Benchmark figures, KernelBench-style.

fast_p: the share of ALL problems that were solved correctly AND ran more than p times faster than the baseline
(fast_0 is the correctness rate). Geometric-mean speedup is reported two ways, each labelled: with failures counted
as 1.0 (the agent leaves the problem as it was) and with failures excluded (over correct problems only). A correct
problem whose best program is slower than a baseline is counted apart (`correct_slower_than_*`): it is correct, its
measured speedup (below 1) enters the means as it is, and it is never a gain.

Every problem ends with one outcome (`outcome_of`): `correct`; `unsupported` (the agent said it cannot write the
problem: the built-in's reach, not a failure); `failed` (the agent wrote programs, none correct: the record says
the last verdict and its reason); `error` (the problem itself could not be run, e.g. its file does not import);
`stopped` (its run was stopped at the bench's time limit or its own: it did not get its time, so it is counted and
listed but left out of the rates -- correctness, fast_p, the means -- and a resumed bench runs it again).
`supported` counts correct + failed. The counts are given overall, per level and per problem kind (kinds.py).

Records say which device each problem ran on. When a bench spans several kinds of device (a cluster of mixed
GPUs), its overall figures mix them: the summary then names the devices (`mixed_devices`) and gives each its own
figures (`per_device`), and every view of the summary says so next to the overall numbers.
"""

from __future__ import annotations

import math
import statistics

P_VALUES = (0.0, 1.0, 1.2, 1.5, 2.0)
BASELINES = ("eager", "compiled")
OUTCOMES = ("correct", "failed", "unsupported", "error", "stopped")
STOPPED = "stopped"


def outcome_of(record: dict) -> str:
    if record.get("status") == STOPPED:
        return STOPPED
    if record.get("correct"):
        return "correct"
    if record.get("status") == "unsupported":
        return "unsupported"
    if record.get("status") == "error":
        return "error"
    return "failed"


def outcome_counts(records: list[dict]) -> dict:
    """correct / failed / unsupported / error counts, supported = correct + failed, and the correct ones whose best
    is slower than each baseline (counted apart: correct, but never a gain)."""
    counts = {o: 0 for o in OUTCOMES}
    for r in records:
        counts[outcome_of(r)] += 1
    return {"supported": counts["correct"] + counts["failed"], **counts,
            **{f"correct_slower_than_{b}": slower_than(records, b) for b in BASELINES},
            # correct, but their speedups were measured beyond the noise bounds (each says so: `noise`)
            "correct_noisy": sum(1 for r in records if r.get("correct") and r.get("noise"))}


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


def rated(records: list[dict]) -> list[dict]:
    """The records the rates are over: all but the stopped ones (they did not get their time)."""
    return [r for r in records if outcome_of(r) != STOPPED]


def summarize(records: list[dict]) -> dict:
    everything, counts = records, outcome_counts(records)
    records = rated(records)
    n = len(records)
    correct = [r for r in records if r.get("correct")]
    out: dict = {**counts, "problems": n + counts[STOPPED], "correctness_rate": len(correct) / n if n else None}
    for b in BASELINES:
        speeds = [_speedup(r, b) for r in correct]
        known = [s for s in speeds if s is not None]
        out[f"fast_p_vs_{b}"] = {f"{p:g}": fast_p(records, p, b) for p in P_VALUES}
        out[f"geomean_speedup_vs_{b}_failures_as_1"] = geomean(
            [(_speedup(r, b) or 1.0) if r.get("correct") else 1.0 for r in records])
        out[f"geomean_speedup_vs_{b}_correct_only"] = geomean(known)
        out[f"median_speedup_vs_{b}_correct_only"] = statistics.median(known) if known else None
    out["geomean_speedup_vs_best_baseline_correct_only"] = geomean(
        [s for r in correct if (s := best_baseline_speedup(r)) is not None])
    out["geomean_speedup_vs_best_baseline_supported_failures_as_1"] = geomean(
        [(best_baseline_speedup(r) or 1.0) if r.get("correct") else 1.0
         for r in records if outcome_of(r) in ("correct", "failed")])
    levels = sorted({r.get("level") for r in everything if r.get("level") is not None})
    out["per_level"] = {str(lv): summarize_level([r for r in everything if r.get("level") == lv]) for lv in levels}
    kinds = sorted({r["kind"] for r in everything if r.get("kind")}, key=_kind_rank)
    out["per_kind"] = {k: summarize_level([r for r in everything if r.get("kind") == k]) for k in kinds}
    devices = sorted({r["device"] for r in everything if r.get("device")})
    out["devices"] = devices
    if len(devices) > 1:
        out["mixed_devices"] = devices
        out["per_device"] = {d: summarize_level([r for r in everything if r.get("device") == d]) for d in devices}
    return out


def mixed_devices_note(devices: list[str]) -> str:
    return (f"these results come from {len(devices)} kinds of device ({'; '.join(devices)}): the overall fast_p "
            f"and geometric means mix them; see the per-device figures")


def _kind_rank(kind: str) -> tuple:
    from .kinds import KINDS

    return (KINDS.index(kind) if kind in KINDS else len(KINDS), kind)


def summarize_level(records: list[dict]) -> dict:
    """The figures of a part of the bench (a level, a kind, a device); rates without its stopped problems."""
    counts = outcome_counts(records)
    records = rated(records)
    return {
        **counts, "problems": len(records) + counts[STOPPED],
        **{f"fast_1_vs_{b}": fast_p(records, 1.0, b) for b in BASELINES},
        **{f"geomean_speedup_vs_{b}_failures_as_1": geomean(
            [(_speedup(r, b) or 1.0) if r.get("correct") else 1.0 for r in records]) for b in BASELINES},
        "geomean_speedup_vs_best_baseline_correct_only": geomean(
            [s for r in records if r.get("correct") and (s := best_baseline_speedup(r)) is not None]),
    }


def best_baseline_speedup(record: dict) -> float | None:
    """The speedup over the faster of eager and torch.compile (None when neither was timed)."""
    speeds = [s for b in BASELINES if (s := _speedup(record, b)) is not None]
    return min(speeds) if speeds else None


def counts_text(summary: dict) -> str:
    """"correct 9/23 · failed 5 · unsupported 8 · error 1 · stopped 2 (supported 14)": the outcomes apart, in one
    line (correct out of the problems that were not stopped)."""
    n = summary["problems"]
    parts = [f"correct {summary['correct']}/{n - summary.get(STOPPED, 0)}"] + [
        f"{o} {summary.get(o, 0)}" for o in OUTCOMES[1:] if o not in ("error", STOPPED) or summary.get(o)]
    slow = f" · correct but slower than eager {summary['correct_slower_than_eager']}" \
        if summary.get("correct_slower_than_eager") else ""
    noisy = f" · speedups measured noisy {summary['correct_noisy']}" if summary.get("correct_noisy") else ""
    return " · ".join(parts) + f" (supported {summary.get('supported', 0)}){slow}{noisy}"


def partial_text(summary: dict) -> str:
    """"" for a complete bench; else what stopped it and how many problems it did not start."""
    if not summary.get("partial"):
        return ""
    stopped = f", {summary['stopped']} stopped at the time limit" if summary.get("stopped") else ""
    return (f"partial: {summary.get('stopped_by') or 'stopped early'}; {summary.get('not_run')} of "
            f"{summary.get('suite_problems')} problems not run{stopped} (run the same command to go on)")
