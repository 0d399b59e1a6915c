"""One problem of a bench: its synthesis run's config, the run done in this process (the local executor's unit of
work), and the record the bench keeps of it, wherever it ran."""

from __future__ import annotations

import socket
import threading
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
STOPPED = "stopped"  # a record's status (and outcome) when the time limit stopped its run


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


def _best_times(run: dict, verdict: dict) -> dict:
    """The best's time and the baselines' times *from the evaluation its speedups came from*. The best's time and
    speedups may come from the end-of-run head-to-head while the best iteration's own verdict carries the eager and
    torch.compile times of another evaluation; on a noisy box the mix read "2.62 ms vs eager 2.81 ms: 0.09x". The
    speedups are ratios within one evaluation, so that evaluation's baseline times are the best's time times them."""
    cand = run.get("best_candidate_ms") or verdict.get("candidate_ms")
    times = {"candidate_ms": cand, "eager_ms": verdict.get("eager_ms") or run.get("eager_ms"),
             "compiled_ms": verdict.get("compiled_ms") or run.get("compiled_ms")}
    for key, speedup in (("eager_ms", run.get("best_speedup_vs_eager")),
                         ("compiled_ms", run.get("best_speedup_vs_compiled"))):
        if cand and speedup:
            times[key] = cand * speedup
    return times


def run_record(store, run_id: str, problem: SuiteProblem, start: float, **where) -> dict:
    """A finished run as one bench record; `where`: node, device (and attempts) it ran on."""
    from ..loop.state import best_noise

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
            **_best_times(run, verdict),
            "speedup_vs_eager": run.get("best_speedup_vs_eager"),
            "speedup_vs_compiled": run.get("best_speedup_vs_compiled"),
            **slower_than_fields(run.get("best_speedup_vs_eager"), run.get("best_speedup_vs_compiled")),
            # the speedups above measured beyond the noise bounds: said with them, never dropped (issue 22)
            "noise": best_noise(next((e["data"] for e in reversed(store.events(run_id)) if e["kind"] == "head_to_head"),
                                     None), best["index"], verdict) if best is not None else [],
            "custom_share": verdict.get("custom_share"), "aten_compute": verdict.get("aten_compute") or [],
            "iterations": len(iterations), "error": run.get("error"), "wall_s": time.monotonic() - start, **where}


def slower_than_fields(speedup_vs_eager: float | None, speedup_vs_compiled: float | None) -> dict:
    """A correct problem whose best is slower than a measured baseline, said in the record (counted apart in the
    summary; its measured speedup is kept as it is, never rounded up to 1.0)."""
    from ..loop.standing import COMPILED, EAGER, standing

    where = standing(-1, speedup_vs_eager, speedup_vs_compiled)
    return {"slower_than_eager": EAGER in where.slower_than, "slower_than_compiled": COMPILED in where.slower_than}


def stop_at(cap_s: float | None, bench_deadline: float | None) -> float | None:
    """When a problem starting now must be stopped (time.time()): after its own cap, and no later than the bench's
    deadline; None: never."""
    ends = [t for t in (bench_deadline, None if cap_s is None else time.time() + cap_s) if t is not None]
    return min(ends) if ends else None


def stopped_record(record: dict, after_s: float) -> dict:
    """A run stopped at the time limit, as its own outcome: not a failure (the problem did not get its time) and
    not correct even when a correct program was found before (its speedups would be an unfinished run's); a resumed
    bench runs it again. What it had reached is kept under `before_stop_*`."""
    reason = f"stopped at the time limit after {after_s:.0f} s"
    if record.get("correct"):
        sx = record.get("speedup_vs_eager")
        reason += " (a correct program was found before" + (f", {sx:.2f}x vs eager)" if sx else ")")
    return {**record, "status": STOPPED, "correct": False, "reason": reason, "stopped_after_s": round(after_s, 1),
            "before_stop_correct": bool(record.get("correct")),
            "before_stop_speedup_vs_eager": record.get("speedup_vs_eager"),
            "speedup_vs_eager": None, "speedup_vs_compiled": None,
            "slower_than_eager": False, "slower_than_compiled": False}


class _CapTimer:
    """Cancels run `run_id` through the store (the path `runs cancel` takes: the loop stops at its next check
    point, an evaluation's process group is killed) once `when` (time.time()) has come."""

    def __init__(self, db_path, run_id: str, when: float | None):
        self.fired = False
        self._timer = None
        if when is not None:
            self._timer = threading.Timer(max(0.0, when - time.time()), self._fire, args=(db_path, run_id))
            self._timer.daemon = True
            self._timer.start()

    def _fire(self, db_path, run_id: str) -> None:
        from ..loop import cancel_run

        self.fired = True
        cancel_run(db_path, run_id)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def solve_here(problem: SuiteProblem, cfg: BenchConfig, bench_deadline: float | None = None) -> dict:
    """One problem's synthesis run in this process (the local executor's unit of work). The run is stopped after
    `cfg.problem_time_limit_s` and at `bench_deadline` (time.time()), and then recorded as stopped."""
    from ..loop import create_run, execute_run
    from ..store import open_store

    start = time.monotonic()
    where = {"node": socket.gethostname(), "device": get_platform(cfg.target).device_name()}
    try:
        rc = checked_run_config(problem, cfg)
        with open_store(cfg.db_path) as store:
            run_id = create_run(store, rc)
        cap = _CapTimer(cfg.db_path, run_id, stop_at(cfg.problem_time_limit_s, bench_deadline))
        try:
            status = execute_run(cfg.db_path, run_id, rc)
        finally:
            cap.cancel()
        if status == "cancelled" and not cap.fired:
            raise KeyboardInterrupt  # interrupted, not finished: this problem must run again on resume
        with open_store(cfg.db_path) as store:
            record = run_record(store, run_id, problem, start, **where)
        return stopped_record(record, record["wall_s"]) if status == "cancelled" else record
    except KForgeError as e:
        return error_record(problem, str(e), start, **where)
