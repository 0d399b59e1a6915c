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
                     max_optimization_iters=cfg.max_optimization_iters, tolerance=cfg.tolerance,
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


def error_record(problem: SuiteProblem, error: str, start: float, **where) -> dict:
    return {**problem_base(problem), "status": "error", "correct": False, "error": error,
            "wall_s": time.monotonic() - start, **where}


def run_record(store, run_id: str, problem: SuiteProblem, start: float, **where) -> dict:
    """A finished run as one bench record; `where`: node, device (and attempts) it ran on."""
    run = store.get_run(run_id)
    iterations = store.iterations(run_id)
    best = next((it for it in iterations if it["index"] == run.get("best_iteration")), None)
    verdict = (best or {}).get("verdict") or {}
    return {**problem_base(problem), "status": run["status"], "correct": best is not None, "run_id": run["id"],
            "candidate_ms": run.get("best_candidate_ms") or verdict.get("candidate_ms"),
            "eager_ms": verdict.get("eager_ms") or run.get("eager_ms"),
            "compiled_ms": verdict.get("compiled_ms") or run.get("compiled_ms"),
            "speedup_vs_eager": run.get("best_speedup_vs_eager"),
            "speedup_vs_compiled": run.get("best_speedup_vs_compiled"),
            **slower_than_fields(run.get("best_speedup_vs_eager"), run.get("best_speedup_vs_compiled")),
            "custom_share": verdict.get("custom_share"), "aten_compute": verdict.get("aten_compute") or [],
            "iterations": len(iterations), "error": run.get("error"), "wall_s": time.monotonic() - start, **where}


def slower_than_fields(speedup_vs_eager: float | None, speedup_vs_compiled: float | None) -> dict:
    """A correct problem whose best is slower than a measured baseline, said in the record (counted apart in the
    summary; its measured speedup is kept as it is, never rounded up to 1.0)."""
    from ..loop.standing import COMPILED, EAGER, standing

    where = standing(-1, speedup_vs_eager, speedup_vs_compiled)
    return {"slower_than_eager": EAGER in where.slower_than, "slower_than_compiled": COMPILED in where.slower_than}


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
