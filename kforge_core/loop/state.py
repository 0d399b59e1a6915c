"""A run as the store holds it: the loop state a resumed run continues from, and the summary the CLI prints.

Resuming reads everything from the store, nothing is re-evaluated: finished iterations keep their code, verdict
(with profile and roofline) and recommendations, so the best program, the feedback for the next generation, the
optimization history, the counters, the tokens spent and the wall time spent are all rebuilt from rows and events.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..agents.base import Recommendation
from .config import RunConfig
from .feedback import history_entry
from .head_to_head import reported_noise
from .standing import standing
from .types import ENDPOINT_FAILED, FUNCTIONAL, OPTIMIZATION, START, STOPPED, Attempt, LoopState, is_faster
from ..store import RunStore
from ..eval.verdict import Verdict

# Kinds that are not the run's own work: time between them and the next event is time the run was not running.
_SESSION_START = ("run_created", "run_resumed")
_NOT_WORK = ("run_interrupted", "cancel_requested", "run_resumed")


def attempt_from_row(row: dict[str, Any]) -> Attempt:
    verdict = Verdict.from_dict(row["verdict"]) if row.get("verdict") else None
    recs = [Recommendation.from_dict(r) for r in (row.get("recommendations") or []) if isinstance(r, dict)]
    return Attempt(iteration=row["index"], pass_name=row["pass"], status=row["status"], reason=row["reason"] or "",
                   code=row.get("code"), verdict=verdict, recommendations=recs,
                   endpoint_failure=(verdict is None and (row["reason"] or "").startswith((ENDPOINT_FAILED, STOPPED))))


def restore_state(store: RunStore, run_id: str, config: RunConfig) -> LoopState:
    """The loop state after the run's last finished iteration."""
    run = store.get_run(run_id)
    finished = [attempt_from_row(r) for r in store.iterations(run_id) if r["finished_at"] is not None]
    k = max(1, config.best_of_k)
    state = LoopState()
    state.next_iteration = (finished[-1].iteration + 1) if finished else 0
    functional = [a for a in finished if a.pass_name == FUNCTIONAL]
    optimization = [a for a in finished if a.pass_name == OPTIMIZATION]
    state.functional_steps = _steps_used(functional, k)
    state.optimization_steps = _steps_used(optimization, k)
    by_index = {a.iteration: a for a in finished}
    if run["best_iteration"] is not None and run["best_iteration"] in by_index:
        state.best = by_index[run["best_iteration"]]
        state.best_speedups = (run["best_speedup_vs_eager"], run["best_speedup_vs_compiled"])
    # the starting program is what a functional pass builds on until one of its own attempts is judged
    judged_functional = [a for a in finished if a.pass_name in (START, FUNCTIONAL) and not a.endpoint_failure]
    state.last = judged_functional[-1] if judged_functional else None
    judged_optimization = [a for a in optimization if not a.endpoint_failure]
    state.last_optimization = judged_optimization[-1] if judged_optimization else None
    if state.best is not None:
        after_best = [a for a in optimization if a.iteration > state.best.iteration]
        state.steps_without_improvement = _steps_used(after_best, k)
        best_so_far: Attempt | None = None
        for a in finished:  # replay "best before each attempt" for the analysis history
            if a.pass_name == OPTIMIZATION and not a.endpoint_failure and best_so_far is not None:
                state.history.append(history_entry(a, best_so_far))
            if a.correct and is_faster(a, best_so_far):
                best_so_far = a
    state.correct_attempts = [a for a in finished if a.correct and a.verdict is not None]
    state.tokens_used = int(run["tokens_prompt"] or 0) + int(run["tokens_completion"] or 0)
    events = store.events(run_id)
    state.passes_started = {e["data"].get("pass") for e in events if e["kind"] == "pass_started"}
    state.head_to_head_done = any(e["kind"] == "head_to_head" for e in events)
    state.elapsed_before_s = _work_time_s(events)
    return state


def _steps_used(attempts: list[Attempt], k: int) -> int:
    """Steps of k iterations each that used up the budget: a step whose every call failed at the endpoint did not
    (the loop gives it back, see engine)."""
    steps = [attempts[i:i + k] for i in range(0, len(attempts), k)]
    return sum(1 for step in steps if not all(a.endpoint_failure for a in step))


def _work_time_s(events: list[dict]) -> float:
    """Seconds the run was actually running: the sum over its sessions (created / each resume) of the time from
    the session's first event to its last event of real work."""
    total = 0.0
    start = last = None
    for e in events:
        ts = dt.datetime.fromisoformat(e["ts"])
        if e["kind"] in _SESSION_START:
            if start is not None and last is not None:
                total += (last - start).total_seconds()
            start, last = ts, None
        elif e["kind"] not in _NOT_WORK and start is not None:
            last = ts
    if start is not None and last is not None:
        total += (last - start).total_seconds()
    return max(0.0, total)


def _usage_facts(store: RunStore, run_id: str) -> dict[str, Any]:
    """Whether any count is an estimate (a server without usage, a call that broke), and the cost of the priced
    calls (None when no agent has a price)."""
    usage = [e["data"] for e in store.events(run_id, kinds=["usage"])]
    costs = [u["cost"] for u in usage if isinstance(u.get("cost"), (int, float))]
    return {"estimated": any(u.get("estimated") for u in usage), "cost": round(sum(costs), 6) if costs else None}


def best_noise(contest: dict | None, iteration: int, verdict: dict) -> list[str]:
    """The noise warnings of the numbers a run's best is reported with: from the head-to-head when its speedups
    came from there, else from its own evaluation's verdict."""
    if contest and any(r.get("iteration") == iteration for r in contest.get("contenders") or []):
        return reported_noise(contest, iteration)
    return [str(w) for w in verdict.get("warnings") or [] if str(w).startswith("noisy timing")]


def summarize_run(store: RunStore, run_id: str) -> dict[str, Any]:
    """The run as the CLI's --json prints it (and `runs show --json`): status, best, iterations."""
    run = store.get_run(run_id)
    rows = store.iterations(run_id)
    best, best_verdict = None, {}
    for row in rows:
        if row["index"] == run["best_iteration"]:
            v = best_verdict = row["verdict"] or {}
            best = {"iteration": row["index"], "status": row["status"], "candidate_ms": row["candidate_ms"],
                    "eager_ms": v.get("eager_ms"), "compiled_ms": v.get("compiled_ms"),
                    "speedup_vs_eager": row["speedup_vs_eager"], "speedup_vs_compiled": row["speedup_vs_compiled"],
                    "code": row["code"]}
    contest = [e["data"] for e in store.events(run_id) if e["kind"] == "head_to_head"]
    if best is not None:
        # how the best was chosen, in words: a head-to-head re-timing, or (none held) its own evaluation
        best["chosen_by"] = (contest[-1]["rule"] if contest and not contest[-1].get("error") else
                             "the fastest median among the run's separate evaluations (no head-to-head was run"
                             + (f": {contest[-1]['error']}" if contest else "") + ")")
        best["head_to_head"] = contest[-1] if contest else None
        row = next((r for r in (contest[-1].get("contenders") or []) if r.get("iteration") == best["iteration"]),
                   None) if contest else None
        if row:  # the numbers the choice was made on, measured side by side
            best.update(candidate_ms=row["candidate_ms"], speedup_vs_eager=row["speedup_vs_eager"],
                        speedup_vs_compiled=row["speedup_vs_compiled"],
                        eager_ms=(contest[-1].get("eager") or {}).get("median_ms"),
                        compiled_ms=(contest[-1].get("compiled") or {}).get("median_ms"))
        best["noise"] = best_noise(contest[-1] if contest else None, best["iteration"], best_verdict)
        # never a slowdown shown as a result: what it loses to, and what to use instead (loop/standing.py)
        where = standing(best["iteration"], best["speedup_vs_eager"], best["speedup_vs_compiled"])
        best.update(slower_than=list(where.slower_than), use=where.use, warning=where.message or None)
    return {
        "run_id": run["id"], "status": run["status"], "error": run["error"], "problem_name": run["problem_name"],
        "target": run["target"], "agent": run["agent"], "model": run["model"],
        "analysis_model": run["analysis_model"], "created_at": run["created_at"],
        "finished_at": run["finished_at"],
        "tokens": {"prompt": run["tokens_prompt"], "completion": run["tokens_completion"], **_usage_facts(store, run_id)},
        "best": best,
        "warnings": [best["warning"]] if best and best.get("warning") else [],
        "iterations": [{"index": r["index"], "pass": r["pass"], "status": r["status"], "reason": r["reason"],
                        "candidate_ms": r["candidate_ms"], "speedup_vs_eager": r["speedup_vs_eager"],
                        "speedup_vs_compiled": r["speedup_vs_compiled"], "finished": r["finished_at"] is not None}
                       for r in rows],
    }
