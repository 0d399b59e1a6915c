"""Manual runs (the Workbench's store side) and a synthesis run given a starting program: real evaluations on the
CPU target, with small timing budgets and no torch.compile baseline so they stay quick."""

from __future__ import annotations

import pytest

from kforge_core.errors import UsageError
from kforge_core.loop import RunConfig, create_manual_run, create_run, execute_run
from kforge_core.loop.manual import execute_manual, launch_manual_job, read_program
from kforge_core.store import InvalidTransition, InvalidValue, open_store
from tests.browser.scripted import BROKEN, CORRECT, PROBLEM

FAST = dict(eval_baselines=False, eval_timing_options={"min_trials": 3, "budget_s": 0.2})


@pytest.fixture
def db(tmp_path):
    return tmp_path / "runs.db"


def new_manual(db, author="ada"):
    with open_store(db) as s:
        return create_manual_run(s, PROBLEM, "relu2", "cpu", author, **FAST)


def test_manual_versions_are_judged_as_the_loop_judges(db):
    run_id = new_manual(db)
    assert execute_manual(db, run_id, "evaluate", BROKEN) == "failed"
    assert execute_manual(db, run_id, "evaluate", CORRECT) == "succeeded"  # reopened from failed
    assert execute_manual(db, run_id, "evaluate", CORRECT.replace("2.0f * v", "v + v")) == "succeeded"  # and again
    with open_store(db) as s:
        run = s.get_run(run_id)
        rows = s.iterations(run_id)
        kinds = [e["kind"] for e in s.events(run_id)]
        diffs = [e for e in s.events(run_id, kinds=["diff"])]
        compile_log = s.events(run_id, kinds=["compile_log"])[0]["data"]["log"]
    assert (run["kind"], run["author"], run["agent"]) == ("manual", "ada", "manual")
    assert [(r["index"], r["pass"], r["status"]) for r in rows] == [
        (0, "manual", "compile_error"), (1, "manual", "correct"), (2, "manual", "correct")]
    assert "candidate line 11" in rows[0]["reason"] and "candidate line 11" in compile_log
    assert run["best_iteration"] in (1, 2) and run["best_speedup_vs_eager"] is not None
    assert rows[1]["verdict"]["candidate"]["min_ms"] <= rows[1]["verdict"]["candidate"]["max_ms"]
    assert [d["data"]["against_iteration"] for d in diffs] == [0, 1]  # each version against the one before
    assert kinds.count("run_finished") == 3 and kinds.count("run_resumed") == 2


def test_the_analyst_reads_the_program_and_the_versions_profile(db):
    run_id = new_manual(db)
    execute_manual(db, run_id, "evaluate", CORRECT)
    assert execute_manual(db, run_id, "analyse", CORRECT, of=0) == "succeeded"
    with open_store(db) as s:
        recs = s.events(run_id, kinds=["recommendations"])
        finished = s.events(run_id, kinds=["run_finished"])[-1]["data"]
    assert len(recs) == 1 and recs[0]["iteration"] == 0 and recs[0]["data"]["analyzed_iteration"] == 0
    titles = [r["title"] for r in recs[0]["data"]["recommendations"]]
    assert titles, recs[0]["data"]  # a one-thread scalar loop: parallelize / vectorize at least
    assert finished["stop_reason"] == "analysis of version #0"


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


@pytest.mark.parametrize("start, first_status, next_pass", [(BROKEN, "compile_error", "functional"),
                                                            (CORRECT, "correct", "optimization")])
def test_a_run_starts_from_a_persons_program(db, start, first_status, next_pass):
    config = RunConfig(problem_source=PROBLEM, problem_name="relu2", target="cpu", agent="builtin",
                       max_functional_iters=1, max_optimization_iters=1, head_to_head_top=0, start_program=start,
                       **FAST)
    with open_store(db) as s:
        run_id = create_run(s, config)
    execute_run(db, run_id, config)
    with open_store(db) as s:
        rows = s.iterations(run_id)
        passes = [e["data"]["pass"] for e in s.events(run_id, kinds=["pass_started"])]
        diff = s.events(run_id, kinds=["diff"])
    assert (rows[0]["index"], rows[0]["pass"], rows[0]["status"], rows[0]["code"]) == (0, "start", first_status,
                                                                                          start)
    assert passes[0] == next_pass and len(rows) >= 2
    assert diff and diff[0]["data"]["against_iteration"] == 0  # the next program is built from the person's
