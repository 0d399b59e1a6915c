"""Run an agent over a suite, one synthesis run per problem, recorded in the run store.

Resumable: each finished problem is appended to DIR/progress.jsonl; re-running the same command skips those.
Parallel across devices: one worker process per device (CUDA_VISIBLE_DEVICES pinned per worker); on a single
device problems run one at a time, because overlapping timed runs would corrupt each other's measurements (each
evaluation's compile step still uses every core the child has).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import KForgeError
from ..platform import get_platform
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
    size_class: str | None = None
    tolerance: str = "default"
    eval_timing_options: dict = field(default_factory=dict)
    eval_baselines: bool = True  # eager + torch.compile timed next to every correct candidate
    devices: int | None = None  # None: all the target reports
    min_custom_share: float | None = None  # below it a correct candidate counts as not faster (see below_share)


def _record(problem: SuiteProblem, cfg: BenchConfig) -> dict:
    from ..loop import RunConfig, create_run, execute_run
    from ..problem import load_problem
    from ..store import open_store

    start = time.monotonic()
    base = {"problem": problem.name, "level": problem.level, "path": str(problem.path)}
    try:
        source = problem.path.read_text()
        load_problem(text=source, name=problem.name)
        rc = RunConfig(problem_source=source, problem_name=problem.name, target=cfg.target, agent=cfg.agent,
                       model=cfg.model, analysis_model=cfg.analysis_model, base_url=cfg.base_url,
                       api_key=cfg.api_key, max_functional_iters=cfg.max_functional_iters,
                       max_optimization_iters=cfg.max_optimization_iters, tolerance=cfg.tolerance,
                       size_class=cfg.size_class, eval_timing_options=cfg.eval_timing_options,
                       eval_baselines=cfg.eval_baselines)
        with open_store(cfg.db_path) as store:
            run_id = create_run(store, rc)
        if execute_run(cfg.db_path, run_id, rc) == "cancelled":
            raise KeyboardInterrupt  # interrupted, not finished: this problem must run again on resume
        with open_store(cfg.db_path) as store:
            run = store.get_run(run_id)
            iterations = store.iterations(run_id)
    except KForgeError as e:
        return {**base, "status": "error", "correct": False, "error": str(e), "wall_s": time.monotonic() - start}
    best = next((it for it in iterations if it["index"] == run.get("best_iteration")), None)
    verdict = (best or {}).get("verdict") or {}
    return {**base, "status": run["status"], "correct": best is not None, "run_id": run["id"],
            "candidate_ms": run.get("best_candidate_ms") or verdict.get("candidate_ms"),
            "eager_ms": verdict.get("eager_ms") or run.get("eager_ms"),
            "compiled_ms": verdict.get("compiled_ms") or run.get("compiled_ms"),
            "speedup_vs_eager": run.get("best_speedup_vs_eager"),
            "speedup_vs_compiled": run.get("best_speedup_vs_compiled"),
            "custom_share": verdict.get("custom_share"), "aten_compute": verdict.get("aten_compute") or [],
            "iterations": len(iterations), "error": run.get("error"), "wall_s": time.monotonic() - start}


def _init_worker(devices: "mp.Queue") -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(devices.get())


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


def run_bench(cfg: BenchConfig, progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> dict:
    platform = get_platform(cfg.target, require_available=True)
    problems = resolve_suite(cfg.suite, cfg.level)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    progress_path = cfg.out_dir / "progress.jsonl"
    done = _load_progress(progress_path)
    todo = [p for p in problems if p.name not in done]
    if done:
        progress(f"resuming: {len(done)} of {len(problems)} problems already done, {len(todo)} to go")
    n_devices = max(1, cfg.devices or platform.device_count())
    finished = len(problems) - len(todo)

    def note(rec: dict) -> None:
        nonlocal finished
        finished += 1
        with open(progress_path, "a") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        done[rec["problem"]] = rec
        sx = rec.get("speedup_vs_eager")
        result = f"correct, {sx:.2f}x vs eager" if rec.get("correct") and sx else rec["status"]
        bar = "#" * int(20 * finished / len(problems))
        progress(f"[{bar:<20}] {finished}/{len(problems)} {rec['problem']}: {result} ({rec['wall_s']:.0f} s)")

    meta = {"suite": cfg.suite, "level": cfg.level, "target": cfg.target, "device": platform.device_name(),
            "agent": cfg.agent, "model": cfg.model, "size_class": cfg.size_class, "tolerance": cfg.tolerance,
            "max_functional_iters": cfg.max_functional_iters, "max_optimization_iters": cfg.max_optimization_iters}
    try:
        if n_devices > 1 and len(todo) > 1:
            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            for d in range(n_devices):
                queue.put(d)
            with ctx.Pool(n_devices, initializer=_init_worker, initargs=(queue,)) as pool:
                for rec in pool.imap_unordered(_solve_star, [(p, cfg) for p in todo]):
                    note(rec)
        else:
            for p in todo:
                note(_record(p, cfg))
    except KeyboardInterrupt:
        write_reports(cfg.out_dir, _judged(done, problems, cfg), meta)
        progress(f"interrupted after {len(done)} of {len(problems)} problems; run the same command to resume")
        raise
    return write_reports(cfg.out_dir, _judged(done, problems, cfg), {**meta, "min_custom_share": cfg.min_custom_share})


def _judged(done: dict[str, dict], problems, cfg: BenchConfig) -> list[dict]:
    return [below_share(done[p.name], cfg.min_custom_share) for p in problems if p.name in done]


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


def _solve_star(args) -> dict:
    return _record(*args)


def config_dict(cfg: BenchConfig) -> dict:
    d = asdict(cfg)
    d.pop("api_key", None)
    return d
