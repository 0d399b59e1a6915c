"""Best-of-k with each evaluation on a device of its own (`Synthesis(parallel_evaluations=True)`, what a Ray
cluster gives a bench with --best-of): a step's programs are evaluated at once, then recorded in iteration order,
so the run decides exactly as it does evaluating them one by one; a cancel stops every evaluation in flight.
Scripted agents and evaluators (tests/test_loop.py): the loop's logic, no real evaluation."""

from __future__ import annotations

import threading

import pytest

from kforge_core.eval.evaluator import EvaluationCancelled
from kforge_core.loop import Synthesis
from kforge_core.loop.types import CANCELLED_ITERATION_STATUS
from tests.loop_fixtures import ScriptedAgent, kinds, offline_config, scripted_evaluate

PROGRAMS = ["# wrong", "# ms=2.0", "# ms=1.5", "# ms=0.7", "# ms=1.2", "# wrong"]


class InFlight:
    """An evaluator that counts the evaluations running at once and (with `meet`) lets none finish before
    `meet` of them are running together: the test fails (BrokenBarrierError) if they run one by one."""

    def __init__(self, meet: int | None = None):
        self.running = self.most = 0
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(meet, timeout=60) if meet else None

    def __call__(self, problem, code, target, options):
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            if self._barrier is not None:
                self._barrier.wait()
            return scripted_evaluate(problem, code, target, options)
        finally:
            with self._lock:
                self.running -= 1


def _run(evaluate_fn, parallel: bool, **config):
    agent = ScriptedAgent(PROGRAMS)
    loop = Synthesis(offline_config(best_of_k=3, max_optimization_iters=1, **config), agent, agent,
                     evaluate_fn=evaluate_fn, parallel_evaluations=parallel)
    return list(loop.events())


def _record(events) -> list:
    """The run as the store keeps it, less the streamed tokens (their threads interleave in any order)."""
    return [(e.kind, getattr(e, "iteration", None), getattr(e, "status", None)) for e in events
            if e.kind != "tokens"]


def test_a_steps_programs_are_evaluated_at_once_and_recorded_as_one_by_one():
    together = InFlight(meet=3)  # both steps have three programs: each step's three must be in flight together
    parallel = _run(together, parallel=True)
    one_by_one = InFlight()
    sequential = _run(one_by_one, parallel=False)
    assert together.most == 3 and one_by_one.most == 1
    assert _record(parallel) == _record(sequential)
    (done,) = kinds(parallel, "run_finished")
    assert done.status == "succeeded" and done.best_iteration == 3
    assert [e.iteration for e in kinds(parallel, "best_updated")] == [1, 2, 3]


def test_a_single_program_is_not_sent_ahead():
    """One program in the step (the others came back without one): evaluated on the loop's thread as usual."""
    evaluator = InFlight()
    agent = ScriptedAgent([None, "# ms=1.0", None])
    loop = Synthesis(offline_config(best_of_k=3, max_optimization_iters=0), agent, agent, evaluate_fn=evaluator,
                     parallel_evaluations=True)
    events = list(loop.events())
    assert kinds(events, "run_finished")[0].best_iteration == 1
    assert evaluator.most == 1
    assert not [t for t in threading.enumerate() if t.name.startswith("kforge-eval-ahead")]


def test_a_cancel_stops_every_evaluation_in_flight():
    """The run is cancelled while its three evaluations wait on their devices: each sees the cancel, the run
    ends cancelled with its open iterations closed, and no evaluation thread is left behind."""
    flag, started, stopped = threading.Event(), [], []
    lock = threading.Lock()

    def blocking_evaluate(problem, code, target, options, *, on_stage=None, cancel=None):
        with lock:
            started.append(code)
            if len(started) == 3:
                flag.set()  # every evaluation is in flight: now the user cancels
        while not cancel():
            threading.Event().wait(0.02)
        with lock:
            stopped.append(code)
        raise EvaluationCancelled()

    agent = ScriptedAgent(PROGRAMS)
    loop = Synthesis(offline_config(best_of_k=3), agent, agent, evaluate_fn=blocking_evaluate,
                     should_cancel=flag.is_set, parallel_evaluations=True)
    events = list(loop.events())
    (done,) = kinds(events, "run_finished")
    assert done.status == "cancelled"
    assert sorted(stopped) == sorted(PROGRAMS[:3])
    finished = kinds(events, "iteration_finished")
    assert sorted(e.iteration for e in finished) == [0, 1, 2]  # closed as stopped, none left open
    assert not [t for t in threading.enumerate() if t.name.startswith("kforge-eval-ahead") and t.is_alive()]


def test_an_evaluator_bug_in_a_parallel_step_fails_the_run_and_is_raised():
    def broken(problem, code, target, options):
        if "1.5" in code:
            raise ZeroDivisionError("our bug")
        return scripted_evaluate(problem, code, target, options)

    agent = ScriptedAgent(PROGRAMS)
    events = Synthesis(offline_config(best_of_k=3), agent, agent, evaluate_fn=broken,
                       parallel_evaluations=True).events()
    seen = _until_raised(events, ZeroDivisionError)
    (done,) = kinds(seen, "run_finished")
    assert done.status == "failed" and "internal error: ZeroDivisionError: our bug" in done.error
    # the candidates before the broken one were recorded as usual, the broken one's iteration closed as stopped
    assert [(e.iteration, e.status) for e in kinds(seen, "iteration_finished")] == [
        (0, "incorrect"), (1, "correct"), (2, CANCELLED_ITERATION_STATUS)]


def _until_raised(events, error: type) -> list:
    """The events a run yielded before it raised `error` (the test fails if it did not)."""
    seen: list = []
    with pytest.raises(error):
        for event in events:
            seen.append(event)
    return seen
