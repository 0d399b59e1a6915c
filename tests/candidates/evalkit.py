"""Helpers for the evaluator tests: fixture paths and a batch runner.

Every evaluation is a real child process that spends most of its ~1.5 s importing torch, so the evaluator tests
register their cases at import time (`case(...)`) and a session fixture (`verdicts` in conftest.py) runs the cases
of the collected test modules two at a time (the CI machine has 2 cores). A test asks for its verdict by name and
waits only for that one.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE / "problems"
HONEST = HERE / "honest"
HOSTILE = HERE / "hostile"

FAST = {"timing": False}
QUICK_TIMING = {"timing": True, "baselines": False,
                "timing_options": {"min_trials": 3, "max_trials": 5, "budget_s": 0.2}}


@dataclass(frozen=True)
class Case:
    name: str
    problem: Path
    candidate: Path
    options: dict = field(default_factory=dict)
    module: str = ""  # the test module that owns the case
    weight: int = 1  # rough cost; heavier cases are started first


REGISTRY: dict[str, Case] = {}


def case(module: str, name: str, problem: str | Path, candidate: str | Path, weight: int = 1, **options) -> str:
    """Register an evaluation of `candidate` (path relative to tests/candidates) against `problem` (a file in
    problems/, or a path). Options are EvalOptions fields; timing is off unless asked for."""
    p = Path(problem)
    p = p if p.is_absolute() else PROBLEMS / p
    c = Path(candidate)
    c = c if c.is_absolute() else HERE / c
    REGISTRY[name] = Case(name, p, c, {**FAST, **options}, module, weight)
    return name


def assert_status(v, status: str, *fragments: str):
    """The verdict has `status` and its reason holds every fragment (case-insensitive); else the log's tail."""
    assert v.status == status, f"expected {status}, got {v.status}: {v.reason}\n{v.log_tail}"
    for frag in fragments:
        assert frag.lower() in v.reason.lower(), f"{frag!r} not in reason: {v.reason}"


def run_case(c: Case):
    from kforge_core.eval.evaluator import EvalOptions, evaluate
    from kforge_core.problem import load_problem

    problem = load_problem(path=c.problem)
    start = time.monotonic()
    verdict = evaluate(problem, c.candidate.read_text(), "cpu", EvalOptions(**c.options))
    verdict.wall_s = verdict.wall_s if verdict.wall_s is not None else time.monotonic() - start
    return verdict


class Batch:
    """Runs registered cases on a small thread pool (each case is a child process); results by name."""

    def __init__(self, workers: int = 2):
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kforge-eval")
        self.futures: dict[str, Future] = {}

    def start(self, names) -> None:
        for name in sorted(names, key=lambda n: -REGISTRY[n].weight):
            self.submit(name)

    def submit(self, name: str) -> Future:
        if name not in self.futures:
            self.futures[name] = self.pool.submit(run_case, REGISTRY[name])
        return self.futures[name]

    def __getitem__(self, name: str):
        return self.submit(name).result()

    def wait_idle(self) -> None:
        """Until every case started so far has its verdict: a test that counts the process's descriptors or
        threads must not count those of the evaluations running in the background."""
        for future in list(self.futures.values()):
            future.exception()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
