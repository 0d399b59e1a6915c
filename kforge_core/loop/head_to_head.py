"""Best means best: at a run's end the top correct candidates are re-timed head to head in one evaluation
(`kforge_core.eval.harness.contest`), and the fastest median there is the best. This module picks the contenders,
words the rule, and turns the evaluation's result into the `head_to_head` event with everything a reader needs
to trust the choice: per contender its median, min, max and trial count, the checks it passed, what the judge
flagged about it, its noise against the stated bounds, and whether it was judged out of process.
"""

from __future__ import annotations

from ..eval.verdict import NOISE_BOUNDS, Timing, noise_warning
from .events import HeadToHead
from .types import Attempt


def pick_contenders(attempts: list[Attempt], n: int) -> list[Attempt]:
    """The top `n` distinct correct programs by speedup vs eager in their own evaluations."""
    seen, out = set(), []
    for a in sorted((a for a in attempts if a.verdict and a.verdict.speedup_vs_eager and a.code),
                    key=lambda a: -a.verdict.speedup_vs_eager):
        if a.code not in seen:
            seen.add(a.code)
            out.append(a)
    return out[:n]


def rule_text(n: int) -> str:
    return (f"best = the fastest median in one head-to-head evaluation of the top {n} correct candidates (picked "
            f"by speedup vs eager), interleaved trial by trial on the same inputs")


def noisy_timings(result: dict) -> list[str]:
    """Which of a head-to-head result's timings are beyond the noise bounds ("#3", "eager", ...)."""
    named = [(f"#{i}", t) for i, t in (result.get("contenders") or {}).items()]
    named += [(k, result.get(k)) for k in ("eager", "compiled")]
    return [name for name, t in named if t and noise_warning(name, _timing(t))]


def contest_event(result: dict, contenders: list[Attempt], kept_best: int, rule: str) -> HeadToHead:
    """The `head_to_head` event for `result` (`kforge_core.eval.evaluator.head_to_head`'s answer): the winner, or
    an error with the best kept as it was (`kept_best`)."""
    judged = result.get("judged")
    warnings = list(result.get("warnings") or [])
    eager, compiled = result.get("eager") or {}, result.get("compiled") or {}
    for name, t in (("eager", eager), ("torch.compile", compiled)):
        warning = noise_warning(name, _timing(t)) if t else ""
        warnings += [warning] if warning else []
    times = result.get("contenders") or {}
    if result.get("error") or len(times) < len(contenders):
        return HeadToHead(contenders=[], eager=eager or None, compiled=compiled or None, best_iteration=kept_best,
                          rule=rule, error=result.get("error") or "not every contender was timed; best kept as it was",
                          warnings=tuple(warnings), judged=judged, noise_bounds=NOISE_BOUNDS)
    per = result.get("per_contender") or {}
    rows = []
    for a in contenders:
        t = times[a.iteration]
        mine = per.get(a.iteration) or {}
        noise = noise_warning("its timing", _timing(t))
        rows.append({"iteration": a.iteration, "candidate_ms": t["median_ms"], "min_ms": t["min_ms"],
                     "max_ms": t["max_ms"], "trials": t["trials"],
                     "speedup_vs_eager": _ratio(eager.get("median_ms"), t["median_ms"]),
                     "speedup_vs_compiled": _ratio(compiled.get("median_ms"), t["median_ms"]),
                     "judged": judged, "checks": list(mine.get("checks") or []),
                     "warnings": list(mine.get("warnings") or []) + ([noise] if noise else []), "noisy": bool(noise)})
    winner = min(rows, key=lambda r: r["candidate_ms"])
    return HeadToHead(contenders=rows, eager=eager or None, compiled=compiled or None,
                      best_iteration=winner["iteration"], rule=rule, warnings=tuple(warnings), judged=judged,
                      noise_bounds=NOISE_BOUNDS)


def reported_noise(contest: dict, iteration: int) -> list[str]:
    """The noise warnings of the numbers a run's best is reported with, from its stored head-to-head: the winner's
    own timing and the baselines its speedups divide (recomputed from the stored spread, so records from before
    noise was kept get them too)."""
    row = next((r for r in contest.get("contenders") or [] if r.get("iteration") == iteration), None)
    if row is None:
        return []
    named = [(f"#{iteration}", {**row, "median_ms": row.get("candidate_ms")}), ("eager", contest.get("eager")),
             ("torch.compile", contest.get("compiled"))]
    warnings = [noise_warning(name, _timing(t)) for name, t in named if t and t.get("min_ms") is not None]
    return [w for w in warnings if w]


def _timing(d: dict) -> Timing:
    return Timing(median_ms=d["median_ms"], min_ms=d["min_ms"], max_ms=d["max_ms"], trials=d["trials"])


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None
