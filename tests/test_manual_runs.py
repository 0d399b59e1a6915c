"""Manual runs (the Workbench's store side): real evaluations on the CPU target, with small timing budgets and no
torch.compile baseline so they stay quick; and a synthesis run given a starting program (scripted agent and
evaluator: the loop's decisions are what is tested)."""

from __future__ import annotations

import pytest

from kforge_core.agents.base import AnalysisRequest, GenerationRequest
from kforge_core.errors import UsageError
from kforge_core.loop import IterationFinished, IterationStarted, PassStarted, create_manual_run
from kforge_core.loop.manual import execute_manual, launch_manual_job, read_program
from kforge_core.store import InvalidTransition, InvalidValue, open_store
from tests.browser.scripted import BROKEN, CORRECT, PROBLEM
from tests.loop_fixtures import offline_config, synthesize

FAST = dict(eval_baselines=False, eval_timing_options={"min_trials": 3, "budget_s": 0.2})


@pytest.fixture
def db(tmp_path):
    return tmp_path / "runs.db"


def new_manual(db, author="ada"):
    with open_store(db) as s:
        return create_manual_run(s, PROBLEM, "relu2", "cpu", author, **FAST)


def test_versions_are_judged_as_the_loop_judges_then_analysed(db):
    run_id = new_manual(db)
    assert execute_manual(db, run_id, "evaluate", BROKEN) == "failed"
    assert execute_manual(db, run_id, "evaluate", CORRECT) == "succeeded"  # reopened from failed
    assert execute_manual(db, run_id, "analyse", CORRECT, of=1) == "succeeded"  # and from succeeded
    with open_store(db) as s:
        run = s.get_run(run_id)
        rows = s.iterations(run_id)
        kinds = [e["kind"] for e in s.events(run_id)]
        diffs = s.events(run_id, kinds=["diff"])
        compile_log = s.events(run_id, kinds=["compile_log"])[0]["data"]["log"]
        recs = s.events(run_id, kinds=["recommendations"])
        finished = s.events(run_id, kinds=["run_finished"])[-1]["data"]
    assert (run["kind"], run["author"], run["agent"]) == ("manual", "ada", "manual")
    assert [(r["index"], r["pass"], r["status"]) for r in rows] == [(0, "manual", "compile_error"),
                                                                   (1, "manual", "correct")]
    assert "candidate line 11" in rows[0]["reason"] and "candidate line 11" in compile_log
    assert run["best_iteration"] == 1 and run["best_speedup_vs_eager"] is not None
    timing = rows[1]["verdict"]["candidate"]
    assert timing["min_ms"] <= timing["median_ms"] <= timing["max_ms"]
    assert [d["data"]["against_iteration"] for d in diffs] == [0]  # each version against the one before
    assert kinds.count("run_finished") == 3 and kinds.count("run_resumed") == 2
    # the analyst read version 1's profile: a one-thread scalar loop gets recommendations
    assert len(recs) == 1 and recs[0]["iteration"] == 1 and recs[0]["data"]["analyzed_iteration"] == 1
    assert recs[0]["data"]["recommendations"], recs[0]["data"]
    assert finished["stop_reason"] == "analysis of version #1"


def test_manual_run_refusals(db, tmp_path):
    with open_store(db) as s:
        with pytest.raises(UsageError, match="author"):
            create_manual_run(s, PROBLEM, "relu2", "cpu", "  ")
        with pytest.raises(UsageError, match="only evaluation settings"):
            create_manual_run(s, PROBLEM, "relu2", "cpu", "ada", max_optimization_iters=3)
        with pytest.raises(InvalidValue, match="unknown run kind"):
            s.create_run("p", PROBLEM, "cpu", kind="robot")
        synthesis = s.create_run("p", PROBLEM, "cpu", agent="builtin")
        s.start_run(synthesis)
        s.finish_run(synthesis, "succeeded")
        with pytest.raises(InvalidTransition):  # only a manual run reopens after success
            s.resume_run(synthesis)
    with pytest.raises(UsageError, match="not a manual run"):
        launch_manual_job(db, synthesis, "evaluate", CORRECT)
    run_id = new_manual(db)
    with pytest.raises(UsageError, match="needs the version"):
        launch_manual_job(db, run_id, "analyse", CORRECT)
    assert execute_manual(db, run_id, "analyse", CORRECT, of=4) == "failed"  # no such version: said, not a crash
    with open_store(db) as s:
        assert "no evaluated version #4" in s.get_run(run_id)["error"]
    program = tmp_path / "p.py"
    program.write_text("x = 1\n")
    assert read_program(program) == "x = 1\n" and not program.exists()


@pytest.mark.parametrize("start, first_status, next_pass", [("# compile_error\nclass ModelNew: pass\n",
                                                             "compile_error", "functional"),
                                                            ("# ms=2.0\nclass ModelNew: pass\n", "correct",
                                                             "optimization")])
def test_a_run_starts_from_a_persons_program(start, first_status, next_pass):
    # one step of the pass that follows (a fixed functional one would go on to optimize: not asked for here)
    config = offline_config(start_program=start, max_functional_iters=1, head_to_head_top=0,
                            max_optimization_iters=1 if next_pass == "optimization" else 0)
    events, agent = synthesize(config, [None, "# ms=1.0\nclass ModelNew: pass\n"])
    started = [(e.iteration, e.pass_name) for e in events if isinstance(e, IterationStarted)]
    finished = {e.iteration: e.status for e in events if isinstance(e, IterationFinished)}
    passes = [e.pass_name for e in events if isinstance(e, PassStarted)]
    assert started == [(0, "start"), (1, next_pass)] and finished == {0: first_status, 1: "correct"}
    assert passes == [next_pass]
    generation = [c for c in agent.calls if isinstance(c, GenerationRequest)]
    assert len(generation) == 1 and generation[0].previous_program == start  # built from the person's program
    if first_status == "correct":  # the analyst read it first, as the best
        assert [c.program for c in agent.calls if isinstance(c, AnalysisRequest)] == [start]
    else:  # its verdict is what the functional pass is told
        assert generation[0].feedback.status == "compile_error"
