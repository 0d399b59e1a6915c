"""One problem of a bench: its synthesis run's config, the run done in this process (the local executor's unit of
work), and the record the bench keeps of it, wherever it ran."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

from ..errors import KForgeError
from ..platform import get_platform
from .suite import SuiteProblem

if TYPE_CHECKING:
    from .runner import BenchConfig


def run_config(problem: SuiteProblem, source: str, cfg: BenchConfig):
    """The synthesis run's config for one problem of the bench."""
    from ..loop import RunConfig

    return RunConfig(problem_source=source, problem_name=problem.name, target=cfg.target, agent=cfg.agent,
                     model=cfg.model, analysis_model=cfg.analysis_model, base_url=cfg.base_url,
                     api_key=cfg.api_key, max_functional_iters=cfg.max_functional_iters,
                     max_optimization_iters=cfg.max_optimization_iters, best_of_k=cfg.best_of_k,
                     tolerance=cfg.tolerance,
                     size_class=cfg.size_class, eval_timing_options=cfg.eval_timing_options,
                     eval_baselines=cfg.eval_baselines)


def checked_run_config(problem: SuiteProblem, cfg: BenchConfig):
    """`run_config` for a problem whose file loads; KForgeError (a clear message) when it does not."""
    from ..problem import load_problem

    try:
        source = problem.path.read_text()
    except OSError as e:
        raise KForgeError(f"cannot read {problem.path}: {e.strerror}") from None
    load_problem(text=source, name=problem.name)
    return run_config(problem, source, cfg)


def problem_base(problem: SuiteProblem) -> dict:
    return {"problem": problem.name, "level": problem.level, "path": str(problem.path)}


REASON_CHARS = 300


def trim_reason(text: str | None, limit: int = REASON_CHARS) -> str:
    """A reason as one readable line: a traceback's last line (the exception), whitespace folded, cut at
    `limit` characters with an ellipsis."""
    text = (text or "").strip()
    if not text:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and lines[0].startswith("Traceback (most recent call last)"):
        lines = [lines[-1]]
    line = " ".join(" ".join(lines).split())
    return line if len(line) <= limit else line[:limit - 1].rstrip() + "…"


def error_record(problem: SuiteProblem, error: str, start: float, **where) -> dict:
    return {**problem_base(problem), "status": "error", "correct": False, "error": error,
            "last_status": None, "reason": trim_reason(error), "coverage": "",
            "wall_s": time.monotonic() - start, **where}


def _coverage(store, run_id: str, best_iteration: int | None) -> str:
    """The agent's coverage note: the best iteration's, else the last one an iteration carried."""
    notes = {}
    for e in store.events(run_id, kinds=("program_extracted", "program_missing")):
        if (e["data"] or {}).get("coverage"):
            notes[e["iteration"]] = e["data"]["coverage"]
    if best_iteration in notes:
        return notes[best_iteration]
    return notes[max(notes)] if notes else ""


def _last_judged(iterations: list[dict]) -> dict | None:
    """The last iteration the evaluator judged (its verdict says what went wrong; a refusal that followed it, such
    as the built-in's "no other variant", only repeats it); with none, the last one that ended at all."""
    finished = [it for it in iterations if it.get("status") and it["status"] != "cancelled"]
    judged = [it for it in finished if it.get("verdict")]
    return (judged or finished or [None])[-1]


def run_record(store, run_id: str, problem: SuiteProblem, start: float, **where) -> dict:
    """A finished run as one bench record; `where`: node, device (and attempts) it ran on."""
    run = store.get_run(run_id)
    iterations = store.iterations(run_id)
    best = next((it for it in iterations if it["index"] == run.get("best_iteration")), None)
    verdict = (best or {}).get("verdict") or {}
    last = _last_judged(iterations)
    # Why it is not correct, in the evaluator's (or the agent's) words: the last iteration's reason (the run's own
    # error, e.g. "no correct program in 3 functional step(s)", says only that the budget ran out)
    reason = "" if best is not None else trim_reason((last or {}).get("reason") or run.get("error"))
    return {**problem_base(problem), "status": run["status"], "correct": best is not None, "run_id": run["id"],
            "last_status": (last or {}).get("status"), "reason": reason,
            "coverage": _coverage(store, run_id, run.get("best_iteration")),
            "candidate_ms": run.get("best_candidate_ms") or verdict.get("candidate_ms"),
            "eager_ms": verdict.get("eager_ms") or run.get("eager_ms"),
            "compiled_ms": verdict.get("compiled_ms") or run.get("compiled_ms"),
            "speedup_vs_eager": run.get("best_speedup_vs_eager"),
            "speedup_vs_compiled": run.get("best_speedup_vs_compiled"),
            "custom_share": verdict.get("custom_share"), "aten_compute": verdict.get("aten_compute") or [],
            "iterations": len(iterations), "error": run.get("error"), "wall_s": time.monotonic() - start, **where}


def solve_here(problem: SuiteProblem, cfg: BenchConfig) -> dict:
    """One problem's synthesis run in this process (the local executor's unit of work)."""
    from ..loop import create_run, execute_run
    from ..store import open_store

    start = time.monotonic()
    where = {"node": socket.gethostname(), "device": get_platform(cfg.target).device_name()}
    try:
        rc = checked_run_config(problem, cfg)
        with open_store(cfg.db_path) as store:
            run_id = create_run(store, rc)
        if execute_run(cfg.db_path, run_id, rc) == "cancelled":
            raise KeyboardInterrupt  # interrupted, not finished: this problem must run again on resume
        with open_store(cfg.db_path) as store:
            return run_record(store, run_id, problem, start, **where)
    except KForgeError as e:
        return error_record(problem, str(e), start, **where)
