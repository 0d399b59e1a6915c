"""Where a bench's problems run: the executor interface and the local executor (one worker per device).

An executor gets the problems still to do and calls `on_record(record)` once per finished problem, in this
process (the bench writes progress and reports there, and nothing else writes them). It must leave a problem
unrecorded when it did not finish -- Ctrl-C raises KeyboardInterrupt out of `run` after closing the runs it had
started -- so that re-running the bench does that problem again. The Ray executor lives in ray_driver.py.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from typing import Callable, Protocol

from ..platform import get_platform
from .suite import SuiteProblem

OnRecord = Callable[[dict], None]


class Executor(Protocol):
    name: str  # "local", "ray"

    def describe(self) -> dict:
        """What the bench's meta says about where it ran (e.g. the device, the cluster address)."""

    def run(self, problems: list[SuiteProblem], cfg, on_record: OnRecord) -> None:
        """Solve every problem, calling `on_record` in this process as each one finishes."""


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

    def run(self, problems: list[SuiteProblem], cfg, on_record: OnRecord) -> None:
        from .problem_run import solve_here

        if self.devices > 1 and len(problems) > 1:
            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            for d in range(self.devices):
                queue.put(d)
            with ctx.Pool(self.devices, initializer=_init_worker, initargs=(queue,)) as pool:
                for rec in pool.imap_unordered(_solve_star, [(p, cfg) for p in problems]):
                    on_record(rec)
        else:
            for p in problems:
                on_record(solve_here(p, cfg))


def _init_worker(devices: "mp.Queue") -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(devices.get())


def _solve_star(args) -> dict:
    from .problem_run import solve_here

    return solve_here(*args)


def make_executor(cfg) -> Executor:
    """The executor `cfg.cluster` names: None or "local" for this machine, else a Ray address."""
    if cfg.cluster in (None, "", "local"):
        return LocalExecutor(cfg.target, cfg.devices)
    from .ray_driver import RayExecutor

    return RayExecutor(cfg.cluster, cpus_per_task=cfg.cpus_per_task)
