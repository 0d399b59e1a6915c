"""The run's head-to-head as recorded (issues 22 item 5 and 20): the `head_to_head` event carries each contender's
times with their spread, the checks it passed, what the judge flagged about it and whether it was judged out of
process, and the noise against the stated bounds; a real SQLite run store keeps all of it; `runs show` and the run's
last line state the rule and the noise. The loop runs with scripted agents and evaluations (tests/loop_fixtures.py):
what is under test is the record, not the timing (tests/test_measure.py times a real contest)."""

from __future__ import annotations

import pytest

from kforge_core.cli import main
from kforge_core.cli.head_to_head_text import head_to_head_lines
from kforge_core.cli.synthesize_cmd import final_line
from kforge_core.loop import Synthesis, create_run, summarize_run
from kforge_core.loop.runs import StoreRecorder
from kforge_core.store import open_store
from tests.loop_fixtures import ScriptedAgent, offline_config, scripted_evaluate

JUDGE_FLAG = ("the judge could not confirm the reported times (median timed call 0.41 ms ...): on a busy machine the "
              "judge's brackets are loose; were the reports forged, they would look like this too")


def _timing(median: float, low: float, high: float, trials: int = 7) -> dict:
    return {"median_ms": median, "min_ms": low, "max_ms": high, "trials": trials}


def contest_result(programs: dict) -> dict:
    """What `eval.evaluator.head_to_head` answers for three contenders, judged: #0 fastest but noisy (median 1.5x
    its fastest trial), #1 flagged by the judge's clock."""
    times = {0: _timing(0.30, 0.20, 0.33), 1: _timing(0.41, 0.40, 0.45), 2: _timing(0.35, 0.34, 0.36)}
    per = {i: {"checks": [{"name": "timed outputs match eager", "passed": True, "detail": "each of its 12 calls"},
                          {"name": "judge's clock", "passed": True, "detail": "every report within its bracket"}],
               "warnings": [JUDGE_FLAG] if i == 1 else []} for i in programs}
    return {"contenders": {i: times[i] for i in programs}, "eager": _timing(0.80, 0.78, 0.86), "compiled": None,
            "checks": [], "warnings": [], "judged": True, "per_contender": per}


@pytest.fixture
def recorded(tmp_path):
    """A run of three correct programs ended by a head-to-head, recorded into a SQLite file through the store
    recorder, as the worker does; the contest's fake answers noisy both times, so the loop re-times it once."""
    asked = []

    def h2h(problem, programs, target, options, on_stage=None, cancel=None):
        asked.append(sorted(programs))
        return contest_result(programs)

    db = tmp_path / "runs.db"
    config = offline_config(max_functional_iters=1, max_optimization_iters=2, patience=5)
    agent = ScriptedAgent(["# ms=0.5\n", "# ms=0.4\n", "# ms=0.45\n"])
    with open_store(db) as store:
        run_id = create_run(store, config)
        store.start_run(run_id)
        recorder, events = StoreRecorder(store, run_id), []
        for e in Synthesis(config, agent, agent, evaluate_fn=scripted_evaluate, head_to_head_fn=h2h).events():
            recorder.record(e)
            events.append(e)
        recorder.close()
    return db, run_id, events, asked


def test_the_event_keeps_checks_noise_and_judging_through_a_sqlite_store(recorded):
    db, run_id, events, asked = recorded
    assert asked == [[0, 1, 2], [0, 1, 2]]  # noisy: re-timed once
    assert "head to head: re-timing, noisy timing" in [e.stage for e in events if e.kind == "eval_stage"]
    (live,) = [e for e in events if e.kind == "head_to_head"]
    with open_store(db) as store:  # a fresh connection: what a later reader (the app, `runs show`) gets
        (stored,) = [e["data"] for e in store.events(run_id) if e["kind"] == "head_to_head"]
    assert stored == live.data()
    assert stored["best_iteration"] == 0 and stored["judged"] is True and stored["error"] is None
    assert stored["noise_bounds"] == {"median_over_min": 1.3, "max_over_median": 3.0}
    assert stored["warnings"] == ["re-timed: the first head-to-head's timings were noisy (#0); these are from a "
                                  "second one"]
    rows = {r["iteration"]: r for r in stored["contenders"]}
    best = rows[0]
    assert (best["candidate_ms"], best["min_ms"], best["max_ms"], best["trials"]) == (0.30, 0.20, 0.33, 7)
    assert best["speedup_vs_eager"] == pytest.approx(0.80 / 0.30) and best["speedup_vs_compiled"] is None
    assert best["judged"] is True and best["noisy"] is True
    assert [c["name"] for c in best["checks"]] == ["timed outputs match eager", "judge's clock"]
    assert best["warnings"] == ["noisy timing (its timing, median 0.3 ms is 1.5x its fastest trial (0.2 ms; bound "
                                "1.3x) over 7 trials): the machine was busy or the timing unstable; re-time before "
                                "trusting this number"]
    assert rows[1]["warnings"] == [JUDGE_FLAG] and rows[1]["noisy"] is False
    assert rows[2]["warnings"] == [] and rows[2]["noisy"] is False


def test_runs_show_states_the_rule_the_judging_and_the_noise(recorded, capsys):
    db, run_id, _, _ = recorded
    assert main(["runs", "show", run_id, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert ("  chosen by: best = the fastest median in one head-to-head evaluation of the top 3 correct candidates "
            "(picked by speedup vs eager), interleaved trial by trial on the same inputs") in out
    assert "judged out of process: each contender ran in a process of its own" in out
    assert "noisy if the median is over 1.3x the fastest trial or the slowest trial over 3x the median" in out
    assert "    [0] 0.3 ms median (min 0.2 ms, max 0.33 ms, 7 trials)  2.67x vs eager  NOISY  <- best" in out
    assert "    [1] 0.41 ms median (min 0.4 ms, max 0.45 ms, 7 trials)  1.95x vs eager\n" in out
    assert "        checks: timed outputs match eager ✓, judge's clock ✓" in out
    assert f"        warning: {JUDGE_FLAG}" in out
    assert "        warning: noisy timing (its timing, median 0.3 ms is 1.5x its fastest trial" in out
    assert "    eager         0.8 ms median (min 0.78 ms, max 0.86 ms, 7 trials)" in out
    assert "    warning: re-timed: the first head-to-head's timings were noisy (#0)" in out


def test_the_run_summary_says_the_best_was_timed_with_noise(recorded):
    db, run_id, _, _ = recorded
    with open_store(db) as store:
        summary = summarize_run(store, run_id)
    best = summary["best"]
    assert best["iteration"] == 0 and best["candidate_ms"] == 0.30
    assert best["noise"] == ["noisy timing (#0, median 0.3 ms is 1.5x its fastest trial (0.2 ms; bound 1.3x) over "
                             "7 trials): the machine was busy or the timing unstable; re-time before trusting this "
                             "number"]
    line = final_line(summary)
    assert "[best = the fastest median in one head-to-head evaluation" in line
    assert line.splitlines()[-1] == f"warning: {best['noise'][0]}"


def test_a_record_from_before_checks_were_kept_still_reads():
    """Runs recorded before the event carried checks, warnings and judging: shown as far as they go, no crash,
    nothing invented."""
    old = {"contenders": [{"iteration": 4, "candidate_ms": 1.0, "min_ms": 0.9, "max_ms": 1.1, "trials": 9,
                           "speedup_vs_eager": 2.0, "speedup_vs_compiled": None}],
           "eager": _timing(2.0, 1.9, 2.2, 9), "compiled": None, "best_iteration": 4, "rule": "best = fastest",
           "error": None}
    lines = head_to_head_lines(old)
    assert lines == ["  head to head (best = fastest):",
                     "    [4] 1 ms median (min 0.9 ms, max 1.1 ms, 9 trials)  2.00x vs eager  <- best",
                     "    eager         2 ms median (min 1.9 ms, max 2.2 ms, 9 trials)"]


def test_a_failed_contest_says_why_and_keeps_what_the_judge_flagged(tmp_path):
    def h2h(problem, programs, target, options, on_stage=None, cancel=None):
        return {"error": "c1: timed calls reported far below the CPU time they used", "warnings": [JUDGE_FLAG]}

    config = offline_config(max_functional_iters=1, max_optimization_iters=1, patience=5)
    agent = ScriptedAgent(["# ms=0.5\n", "# ms=0.4\n"])
    events = list(Synthesis(config, agent, agent, evaluate_fn=scripted_evaluate, head_to_head_fn=h2h).events())
    (contest,) = [e for e in events if e.kind == "head_to_head"]
    assert contest.error.startswith("c1: timed calls") and contest.best_iteration == 1 and contest.contenders == []
    assert head_to_head_lines(contest.data()) == [
        "  head to head not decided: c1: timed calls reported far below the CPU time they used",
        f"    warning: {JUDGE_FLAG}"]


def _contest_of(answers: list) -> tuple[object, list]:
    """The head-to-head event of a two-program run whose contest answers `answers` in turn."""
    asked = []

    def h2h(problem, programs, target, options, on_stage=None, cancel=None):
        asked.append(programs)
        return answers[len(asked) - 1](programs)

    config = offline_config(max_functional_iters=1, max_optimization_iters=1, patience=5)
    agent = ScriptedAgent(["# ms=0.5\n", "# ms=0.4\n"])
    events = list(Synthesis(config, agent, agent, evaluate_fn=scripted_evaluate, head_to_head_fn=h2h).events())
    (contest,) = [e for e in events if e.kind == "head_to_head"]
    return contest, asked


def test_a_steady_contest_is_not_re_timed():
    def steady(programs):
        return {**contest_result(programs), "contenders": {i: _timing(0.3 + i / 10, 0.29 + i / 10, 0.31 + i / 10)
                                                           for i in programs}}

    contest, asked = _contest_of([steady])
    assert len(asked) == 1 and contest.warnings == () and not any(r["noisy"] for r in contest.contenders)


def test_a_failed_re_time_is_said_and_the_first_contest_kept():
    """A contender that fails a check in the re-time is not hidden: the noisy first contest stands, with a warning
    naming the failure."""
    contest, asked = _contest_of([contest_result, lambda programs: {"error": "c1: ran no kernel it compiled"}])
    assert len(asked) == 2 and contest.error is None and contest.best_iteration == 0
    assert contest.warnings == ("re-timing the noisy head-to-head failed (c1: ran no kernel it compiled); these are "
                                "the first one's timings",)
