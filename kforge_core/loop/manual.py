"""Manual runs: programs a person writes (the app's Workbench), judged by the same evaluator as the loop.

A manual run (`kind="manual"`, with its `author`) holds one iteration per version the person evaluated (pass
"manual"): the same events as a loop iteration (program, diff against the previous version, compiler output,
verdict, timings, profile and roofline), the best version kept by the loop's rule. It is created by
`create_manual_run` and each job runs in a detached worker (`launch_manual_job` -> `python -m kforge_core.loop.worker
--manual evaluate|analyse --program FILE`), never in the process of whoever asked, since the program is untrusted:

- `evaluate`: judge the program as the next version;
- `analyse`: the built-in analysis agent (no endpoint) reads the program and the profile of version `of` and
  records its recommendations on that version.

Each job reopens the run (a manual run may be resumed from `succeeded`), records its events and finishes it again:
`succeeded` once a version is correct, `failed` otherwise.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

from ..errors import UsageError
from ..store import RunStore, open_store, resolve_db_path
from .config import RunConfig
from .engine import Synthesis
from .events import LoopEvent
from .runs import launch_worker, record_events
from .state import attempt_from_row, restore_state
from .types import Attempt, Cancelled

MANUAL = "manual"  # the run kind, and the pass of its iterations
MANUAL_JOBS = ("evaluate", "analyse")
# the settings a manual run keeps for its evaluations (RunConfig fields); its agents are never asked to write
EVAL_FIELDS = ("tolerance", "size_class", "eval_timeout_s", "eval_timing_options", "eval_baselines")


def create_manual_run(store: RunStore, problem_source: str, problem_name: str, target: str, author: str,
                      **evaluation) -> str:
    """Check the problem and the target (as `create_run` does) and create a queued manual run; return its id."""
    unknown = set(evaluation) - set(EVAL_FIELDS)
    if unknown:
        raise UsageError(f"a manual run keeps only evaluation settings ({', '.join(EVAL_FIELDS)}), not "
                         f"{', '.join(sorted(unknown))}")
    if not (author or "").strip():
        raise UsageError("a manual run needs its author")
    config = _config(problem_source, problem_name, target, evaluation)
    config.validate()
    from ..platform import get_platform
    from ..problem import load_problem

    get_platform(target, require_available=True)
    load_problem(text=problem_source, name=problem_name)
    return store.create_run(problem_name, problem_source, target, agent=MANUAL, config=config.to_record(),
                            kind=MANUAL, author=author.strip())


def _config(problem_source: str, problem_name: str, target: str, evaluation: dict) -> RunConfig:
    # "builtin" only so the config validates: a manual run's iterations are written by a person, and its analysis
    # is the built-in agent's; no generation agent is ever built
    return RunConfig(problem_source=problem_source, problem_name=problem_name, target=target, agent="builtin",
                     max_optimization_iters=1, head_to_head_top=0, **evaluation)


def launch_manual_job(db_path: str | os.PathLike | None, run_id: str, job: str, program: str,
                      of: int | None = None) -> int:
    """Start a detached worker for one job on manual run `run_id`; return its pid. The program travels in an
    owner-only file next to the store, which the worker reads and deletes."""
    if job not in MANUAL_JOBS:
        raise UsageError(f"unknown manual job {job!r}; known: {', '.join(MANUAL_JOBS)}")
    if job == "analyse" and of is None:
        raise UsageError("an analysis needs the version whose profile it reads (of=)")
    path = resolve_db_path(db_path)
    with open_store(path) as store:
        run = store.get_run(run_id)
    if run.get("kind") != MANUAL:
        raise UsageError(f"run {run_id} is not a manual run")
    folder = path.parent / "kforge-files" / "manual"
    folder.mkdir(parents=True, exist_ok=True)
    program_path = folder / f"{run_id}-{secrets.token_hex(6)}.py"
    fd = os.open(program_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(program)
    extra = ("--manual", job, "--program", str(program_path)) + (("--of", str(of)) if of is not None else ())
    return launch_worker(path, run_id, manual_config(run), extra_args=extra)


def manual_config(run: dict) -> RunConfig:
    return RunConfig.from_run(run, agent="builtin")


def execute_manual(db_path: str | os.PathLike | None, run_id: str, job: str, program: str,
                   of: int | None = None) -> str:
    """Run one job of manual run `run_id` in this process (the worker); return the run's status afterwards."""
    from ..agents.builtin_analysis import BuiltinAnalysisAgent

    with open_store(db_path) as store:
        run = store.get_run(run_id)
        if run.get("kind") != MANUAL:
            raise UsageError(f"run {run_id} is not a manual run")
        config = manual_config(run)
        if run["status"] == "queued":
            store.start_run(run_id)
        else:
            store.resume_run(run_id)
        state = restore_state(store, run_id, config)
        rows = [r for r in store.iterations(run_id) if r["finished_at"] is not None]

        def events(cancel: threading.Event) -> Iterator[LoopEvent]:
            synthesis = Synthesis(config, None, BuiltinAnalysisAgent(), state=state, should_cancel=cancel.is_set)
            if job == "evaluate":
                base = attempt_from_row(rows[-1]) if rows and rows[-1].get("code") else None
                return _evaluate(synthesis, program, base, run.get("author") or "a person")
            target = next((r for r in rows if r["index"] == of), None)
            if target is None:
                raise UsageError(f"run {run_id} has no evaluated version #{of} to analyse")
            return _analyse(synthesis, program, attempt_from_row(target))

        return record_events(store, run_id, events)


def _evaluate(synthesis: Synthesis, program: str, base: Attempt | None, author: str) -> Iterator[LoopEvent]:
    index = synthesis.state.next_iteration
    synthesis.state.next_iteration += 1
    try:
        attempt = yield from synthesis._judge_given(index, MANUAL, program, f"version {index}, written by {author}",
                                                    base)
        synthesis.stop_reason = f"version #{index} evaluated: {attempt.status}"
        yield from synthesis._close(*_outcome(synthesis))
    except (Cancelled, KeyboardInterrupt):
        synthesis.stop_reason = "cancelled"
        yield from synthesis._close("cancelled", None)


def _analyse(synthesis: Synthesis, program: str, version: Attempt) -> Iterator[LoopEvent]:
    """The analyst reads `program` (the editor's text) with the verdict and profile `version` measured."""
    changed = program != (version.code or "")
    measured = Attempt(version.iteration, version.pass_name, version.status, version.reason, program,
                       version.verdict)
    try:
        yield from synthesis._analyse(version.iteration, measured)
        synthesis.stop_reason = f"analysis of version #{version.iteration}" + \
            (" (the program was edited since it was measured)" if changed else "")
        yield from synthesis._close(*_outcome(synthesis))
    except (Cancelled, KeyboardInterrupt):
        synthesis.stop_reason = "cancelled"
        yield from synthesis._close("cancelled", None)


def _outcome(synthesis: Synthesis) -> tuple[str, str | None]:
    if synthesis.state.best is not None:
        return "succeeded", None
    return "failed", "no version is correct yet"


def read_program(path: str | os.PathLike) -> str:
    """The program a launcher left for this worker; the file is deleted once read (it held untrusted code)."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    finally:
        p.unlink(missing_ok=True)
