"""Where a bench's problems run: the executor interface and the local executor (one worker per device).

An executor gets the problems still to do and calls `on_record(record)` once per finished problem, in this
process (the bench writes progress and reports there, and nothing else writes them). It must leave a problem
unrecorded when it did not finish -- Ctrl-C raises KeyboardInterrupt out of `run` after closing the runs it had
started -- so that re-running the bench does that problem again. `should_start()` (when given) is asked before
each problem starts: once it says False, no new problem starts and `run` returns (the bench's time limit). A
running problem is stopped at its own cap (`cfg.problem_time_limit_s`) and at the bench's deadline (`should_start`'s
`deadline`), through the run's cancel path, and recorded as stopped (problem_run.stopped_record): a resumed bench
runs it again. The Ray executor lives in ray_driver.py.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Callable, Protocol

from ..platform import get_platform
from .suite import SuiteProblem

OnRecord = Callable[[dict], None]
ShouldStart = Callable[[], bool]


class Executor(Protocol):
    name: str  # "local", "ray"

    def describe(self) -> dict:
        """What the bench's meta says about where it ran (e.g. the device, the cluster address)."""

    def run(self, problems: list[SuiteProblem], cfg, on_record: OnRecord,
            should_start: ShouldStart | None = None) -> None:
        """Solve every problem (while `should_start()` allows), calling `on_record` in this process as each one
        finishes."""


class TimeLimit:
    """`should_start` for a time limit: True until `seconds` have passed since it was made."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def __call__(self) -> bool:
        return time.monotonic() < self.deadline


class LocalExecutor:
    """This machine: one worker process per device (CUDA_VISIBLE_DEVICES pinned per worker); on a single device
    problems run one at a time, because overlapping timed runs would corrupt each other's measurements (each
    evaluation's compile step still uses every core the child has)."""

    name = "local"

    def __init__(self, target: str, devices: int | None = None):
        self.platform = get_platform(target, require_available=True)
        self.devices = max(1, devices or self.platform.device_count())

    def describe(self) -> dict:
        return {"executor": "local", "device": self.platform.device_name(), "devices": self.devices}

    def run(self, problems: list[SuiteProblem], cfg, on_record: OnRecord,
            should_start: ShouldStart | None = None) -> None:
        from .problem_run import solve_here

        # A deadline in wall-clock time, the same for every process here: the pool's workers ask the clock when
        # they take a problem, and every running problem is stopped there.
        deadline = _wall_deadline(should_start)
        if self.devices > 1 and len(problems) > 1:
            # The pool hands out every task at once; a worker returns None for one it must not start.
            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            for d in visible_devices(self.devices):
                queue.put(d)
            with ctx.Pool(self.devices, initializer=_init_worker, initargs=(queue,)) as pool:
                for rec in pool.imap_unordered(_solve_star, [(p, cfg, deadline) for p in problems]):
                    if rec is not None:
                        on_record(rec)
        else:
            for p in problems:
                if should_start is not None and not should_start():
                    return
                on_record(solve_here(p, cfg, deadline))


def visible_devices(n: int) -> list[str]:
    """The names of this process's first n devices as CUDA_VISIBLE_DEVICES spells them: a bench started with
    CUDA_VISIBLE_DEVICES=2,3 pins its workers to 2 and 3, not to 0 and 1."""
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:n] if len(listed) >= n else [str(d) for d in range(n)]


def _init_worker(devices: "mp.Queue") -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = devices.get()


def _wall_deadline(should_start: ShouldStart | None) -> float | None:
    """`should_start`'s deadline as time.time() (it exposes its monotonic one as `deadline`)."""
    deadline = getattr(should_start, "deadline", None)
    return None if deadline is None else time.time() + (deadline - time.monotonic())


def _solve_star(args) -> dict | None:
    from .problem_run import solve_here

    problem, cfg, deadline = args
    if deadline is not None and time.time() >= deadline:
        return None  # the time limit passed before this worker got to it: left for the next run
    return solve_here(problem, cfg, deadline)


def make_executor(cfg) -> Executor:
    """The executor `cfg.cluster` names: None or "local" for this machine, else a Ray address."""
    if cfg.cluster in (None, "", "local"):
        return LocalExecutor(cfg.target, cfg.devices)
    from .ray_driver import RayExecutor

    return RayExecutor(cfg.cluster, cpus_per_task=cfg.cpus_per_task)
