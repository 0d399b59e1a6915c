"""The loop's own logic with a scripted agent and a scripted evaluator (no model, no real evaluation, where
those would only cost time): patience, budgets, best-of-k, cancel between steps, internal errors, a resumed
state's counters.
"""

from __future__ import annotations

import pytest

from kforge_core.loop import CANCELLED_ITERATION_STATUS, LoopState, Synthesis
from tests.loop_fixtures import (  # noqa: F401 - pytest fixtures
    ScriptedAgent, kinds, no_user_llm_settings, offline_config, scripted_evaluate, synthesize)


def test_patience_keeps_the_best_not_the_last():
    events, _ = synthesize(offline_config(), ["# ms=1.0", "# ms=0.8", "# ms=0.9", "# wrong", "# ms=0.85"])
    finished = kinds(events, "iteration_finished")
    assert [(e.iteration, e.status, e.candidate_ms) for e in finished] == [
        (0, "correct", 1.0), (1, "correct", 0.8), (2, "correct", 0.9), (3, "incorrect", None)]
    assert [e.iteration for e in kinds(events, "best_updated")] == [0, 1]
    (done,) = kinds(events, "run_finished")
    assert done.status == "succeeded" and done.best_iteration == 1 and done.stop_reason.startswith("patience: 2")


def test_optimization_feedback_says_why_the_last_attempt_was_not_kept():
    events, agent = synthesize(offline_config(), ["# ms=1.0", "# wrong", "# ms=2.0", "# ms=3.0"])
    generation_calls = [c for c in agent.calls if hasattr(c, "pass_name")]
    assert generation_calls[2].previous_program == "# ms=1.0"  # always rewrites the best
    assert "was not kept: incorrect: values differ" in generation_calls[2].feedback.reason
    assert generation_calls[2].feedback.recommendations[0].title == "Try"
    analysis_calls = [c for c in agent.calls if hasattr(c, "history")]
    assert analysis_calls[1].history[0]["outcome"].startswith("incorrect")


def test_token_budget_stops_between_steps():
    events, _ = synthesize(offline_config(max_total_tokens=30), ["# wrong", "# wrong", "# ms=1"])
    (done,) = kinds(events, "run_finished")
    assert done.status == "failed" and "token budget spent (40 of 30 tokens)" in done.error
    assert len(kinds(events, "iteration_finished")) == 2


def test_wall_clock_budget():
    now = [0.0]

    def clock():
        now[0] += 40.0  # every look at the clock costs 40 s
        return now[0]

    events, _ = synthesize(offline_config(max_wall_s=100), ["# wrong"] * 5, clock=clock)
    (done,) = kinds(events, "run_finished")
    assert "wall-clock budget spent" in done.error
    assert 1 <= len(kinds(events, "iteration_finished")) < 5


def test_functional_budget_and_no_optimization_pass():
    events, _ = synthesize(offline_config(max_functional_iters=2), ["# wrong", None])
    (done,) = kinds(events, "run_finished")
    assert done.status == "failed" and done.error == "no correct program in 2 functional step(s)"
    events, _ = synthesize(offline_config(max_optimization_iters=0), ["# wrong", "# ms=2"])
    (done,) = kinds(events, "run_finished")
    assert done.status == "succeeded" and "no optimization pass" in done.stop_reason
    assert [e.pass_name for e in kinds(events, "pass_started")] == ["functional"]


def test_best_of_k_generates_in_parallel_and_keeps_the_fastest():
    events, agent = synthesize(offline_config(best_of_k=3, max_optimization_iters=1),
                               ["# wrong", "# ms=2.0", "# ms=1.5", "# ms=0.7", "# ms=1.2", "# wrong"])
    started = [e.iteration for e in kinds(events, "iteration_started")]
    assert started == [0, 1, 2, 3, 4, 5]
    assert [e.iteration for e in kinds(events, "best_updated")] == [1, 2, 3]
    (done,) = kinds(events, "run_finished")
    assert done.best_iteration == 3
    # the optimization step's three candidates all rewrote the best of the functional step
    assert [c.previous_program for c in agent.calls if getattr(c, "iteration", 0) >= 3] == ["# ms=1.5"] * 3
    threads = {e.iteration for e in kinds(events, "tokens")}
    assert threads == {0, 1, 2, 3, 4, 5}


def test_cancel_flag_between_steps():
    flag = {"cancel": False}

    def on_event_cancel(events_iter):
        for event in events_iter:
            if event.kind == "iteration_finished":
                flag["cancel"] = True
            yield event

    agent = ScriptedAgent(["# wrong"] * 3)
    loop = Synthesis(offline_config(), agent, agent, evaluate_fn=scripted_evaluate,
                     should_cancel=lambda: flag["cancel"])
    events = list(on_event_cancel(loop.events()))
    (done,) = kinds(events, "run_finished")
    assert done.status == "cancelled" and len(kinds(events, "iteration_finished")) == 1


def test_internal_error_is_recorded_then_raised():
    def broken_evaluate(*args):
        raise ZeroDivisionError("our bug")

    agent = ScriptedAgent(["# ms=1"])
    loop = Synthesis(offline_config(), agent, agent, evaluate_fn=broken_evaluate)
    seen = []
    with pytest.raises(ZeroDivisionError):
        for event in loop.events():
            seen.append(event)
    assert seen[-1].kind == "run_finished" and seen[-1].status == "failed"
    assert "internal error: ZeroDivisionError: our bug" in seen[-1].error
    assert kinds(seen, "iteration_finished")[0].status == CANCELLED_ITERATION_STATUS


def test_resumed_state_continues_counting():
    state = LoopState(next_iteration=7, functional_steps=2, passes_started={"functional"})
    events, agent = synthesize(offline_config(max_functional_iters=3, max_optimization_iters=0),
                               [None] * 7 + ["# ms=1"], state=state)
    assert [e.iteration for e in kinds(events, "iteration_started")] == [7]
    assert not kinds(events, "pass_started")
