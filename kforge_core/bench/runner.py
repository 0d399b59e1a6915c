"""Run an agent over a suite, one synthesis run per problem, recorded in the run store.

Resumable: each finished problem is appended to DIR/progress.jsonl; re-running the same command skips those.
Problems run in a stratified order (kinds.py: one of every kind first, then each kind near its share), so a bench
cut short -- by `time_limit_s` (no new problem starts after it, and the running one is stopped there), Ctrl-C or a
device lease running out -- has measured a representative part of the suite, and the next run goes on. A problem
stopped by the time limit (the bench's, or its own `problem_time_limit_s`) is recorded as `stopped` with how long
it ran, counted and listed but left out of the rates, and run again by the next run of the same command.
Where the problems run is the executor's business (executors.py): this machine, one worker per device (the
default), or a Ray cluster (`cluster`, ray_driver.py). Either way only this process writes progress.jsonl and the
reports, and every record says on which node and device its problem ran.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .kinds import problem_kind, stratified
from .metrics import STOPPED, outcome_of
from .report import write_reports
from .suite import SuiteProblem, resolve_suite


@dataclass
class BenchConfig:
    suite: str
    target: str
    out_dir: Path
    agent: str = "builtin"
    level: int | None = None
    model: str | None = None
    analysis_model: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)  # reaches workers in memory only, never files
    db_path: str | None = None
    max_functional_iters: int = 3
    max_optimization_iters: int = 3
    best_of_k: int = 1  # candidates per step; on a Ray cluster each one's evaluation is a task of its own
    size_class: str | None = None
    tolerance: str = "default"
    eval_timing_options: dict = field(default_factory=dict)
    eval_baselines: bool = True  # eager + torch.compile timed next to every correct candidate
    devices: int | None = None  # None: all the target reports (local executor)
    min_custom_share: float | None = None  # below it a correct candidate counts as not faster (see below_share)
    cluster: str | None = None  # a Ray address ("auto", "ray://HOST:PORT", "HOST:PORT"); None: this machine
    cpus_per_task: float = 1.0  # Ray: CPU cores one CPU-target problem asks for
    time_limit_s: float | None = None  # no problem starts after this many seconds, a running one is stopped there
    problem_time_limit_s: float | None = None  # a problem's run is stopped after this many seconds


def _load_progress(path: Path) -> dict[str, dict]:
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
                done[rec["problem"]] = rec
            except (ValueError, KeyError):
                continue  # a line cut short by an interruption: that problem runs again
    return done


def result_text(rec: dict) -> str:
    """A finished problem in the progress line's words: its outcome, speedup and what to know about it."""
    sx = rec.get("speedup_vs_eager")
    outcome = outcome_of(rec)
    result = f"correct, {sx:.2f}x vs eager" if outcome == "correct" and sx else outcome
    if outcome != "correct" and rec.get("reason"):
        last = f"last verdict {rec['last_status']}: " if rec.get("last_status") else ""
        result += f" ({last}{rec['reason'][:160]})"
    if outcome == "correct" and sx and sx < 1.0:
        result += " (SLOWER than eager)"
    if outcome == "correct" and rec.get("noise"):
        result += " (noisy timing: re-time before trusting this number)"
    return result


def run_bench(cfg: BenchConfig, progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr), *,
              executor=None) -> dict:
    """Run (or resume) the bench; `executor` None: the one `cfg` asks for (executors.make_executor)."""
    from .executors import make_executor

    executor = executor or make_executor(cfg)
    problems = resolve_suite(cfg.suite, cfg.level)
    kinds = {p.name: problem_kind(p) for p in problems}
    problems = stratified(problems, kinds)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    progress_path = cfg.out_dir / "progress.jsonl"
    done = _load_progress(progress_path)
    # a problem stopped at the time limit did not get its time: it runs again (its record stays until then)
    todo = [p for p in problems if p.name not in done or outcome_of(done[p.name]) == STOPPED]
    finished = len(problems) - len(todo)
    if done:
        again = sum(1 for p in todo if p.name in done)
        progress(f"resuming: {finished} of {len(problems)} problems already done, {len(todo)} to go"
                 + (f" ({again} stopped at the time limit before, run again)" if again else ""))

    def note(rec: dict) -> None:
        nonlocal finished
        finished += 1
        with open(progress_path, "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        done[rec["problem"]] = rec
        result = result_text(rec)
        bar = "#" * int(20 * finished / len(problems))
        where = f" on {rec['node']}" if executor.name != "local" and rec.get("node") else ""
        progress(f"[{bar:<20}] {finished}/{len(problems)} {rec['problem']}: {result} ({rec['wall_s']:.0f} s{where})")

    meta = {"suite": cfg.suite, "level": cfg.level, "target": cfg.target, **executor.describe(),
            "agent": cfg.agent, "model": cfg.model, "size_class": cfg.size_class, "tolerance": cfg.tolerance,
            "max_functional_iters": cfg.max_functional_iters, "max_optimization_iters": cfg.max_optimization_iters,
            "best_of_k": cfg.best_of_k, "order": "stratified by problem kind", "time_limit_s": cfg.time_limit_s,
            "problem_time_limit_s": cfg.problem_time_limit_s}
    limit = None
    if cfg.time_limit_s is not None:
        from .executors import TimeLimit

        limit = TimeLimit(cfg.time_limit_s)
    try:
        if limit is None:
            executor.run(todo, cfg, note)
        else:
            executor.run(todo, cfg, note, should_start=limit)
    except KeyboardInterrupt:
        write_reports(cfg.out_dir, _judged(done, problems, kinds, cfg), {**meta, **_completion(done, problems)})
        progress(f"interrupted after {len(done)} of {len(problems)} problems; run the same command to resume")
        raise
    completion = _completion(done, problems, cfg.time_limit_s if limit is not None and not limit() else None)
    if completion["not_run"] and completion["stopped_by"]:
        progress(f"time limit of {cfg.time_limit_s:g} s reached: {completion['not_run']} of {len(problems)} "
                 f"problems not started; run the same command to go on")
    if completion["stopped"]:
        progress(f"{completion['stopped']} problem(s) stopped at the time limit; the same command runs them again")
    return write_reports(cfg.out_dir, _judged(done, problems, kinds, cfg),
                         {**meta, "min_custom_share": cfg.min_custom_share, **completion})


def _completion(done: dict[str, dict], problems: list[SuiteProblem], limit_hit: float | None = None) -> dict:
    """Whether the results cover the whole suite; what stopped them when not (problems not started, problems
    stopped at the time limit: both run on resume)."""
    left = sum(1 for p in problems if p.name not in done)
    stopped = sum(1 for p in problems if p.name in done and outcome_of(done[p.name]) == STOPPED)
    why = (f"time limit of {limit_hit:g} s reached" if limit_hit is not None else "interrupted") if left else None
    if stopped and why is None:
        why = "time limit reached"
    return {"partial": bool(left or stopped), "suite_problems": len(problems), "not_run": left, "stopped": stopped,
            "stopped_by": why}


def _judged(done: dict[str, dict], problems, kinds: dict[str, str], cfg: BenchConfig) -> list[dict]:
    """Finished problems in the suite's (stratified) order, each with its kind and outcome (worked out here, so
    records from an older progress file get them too)."""
    out = []
    for p in problems:
        if p.name in done:
            rec = below_share({**done[p.name], "kind": kinds[p.name]}, cfg.min_custom_share)
            out.append({**rec, "outcome": outcome_of(rec)})
    return out


def below_share(record: dict, min_share: float | None) -> dict:
    """A correct candidate whose own kernels do less than `min_share` of its forward's work is counted as not
    faster (its speedups become unknown, i.e. 1.0 where failures count as 1.0); the measured ones are kept as
    `measured_speedup_vs_*`. Applied when the report is written, so a resumed run may use another threshold."""
    share = record.get("custom_share")
    if min_share is None or not record.get("correct") or share is None or share >= min_share:
        return record
    return {**record, "below_custom_share": True,
            **{f"measured_speedup_vs_{b}": record.get(f"speedup_vs_{b}") for b in ("eager", "compiled")},
            "speedup_vs_eager": None, "speedup_vs_compiled": None}


def config_dict(cfg: BenchConfig) -> dict:
    d = asdict(cfg)
    d.pop("api_key", None)
    return d
