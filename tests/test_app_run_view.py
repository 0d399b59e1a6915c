"""The run view (Synthesize page with ?run=): a stored run replayed from a real temporary SQLite store, written
through the store API as a worker would have written it; no loop runs here."""

from __future__ import annotations

import pytest

from kforge_core.store import EVENT_KINDS, open_store
from tests.browser.appkit import app, app_env, texts, use_targets  # noqa: F401,F811 - pytest fixtures
from tests.browser.seed import (JUDGE_FLAG, MARKER_PROGRAM, head_to_head_data, seed_finished_run, seed_live_run,
                                seed_unsupported_run)


@pytest.fixture
def finished_run(app_env):
    with open_store() as s:
        return seed_finished_run(s)


def metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def open_tab(at, run_id: str, tab: str) -> str:
    """Open the iteration detail's `tab`, as a click does, and return the page's text."""
    at.session_state[f"kf-tabs:{run_id}"] = tab
    at.run()
    assert not at.exception
    return texts(at)


def test_replays_a_finished_run(finished_run, use_targets):
    at = app(run=finished_run).run()
    assert not at.exception
    body = texts(at)
    assert "swish_bias" in body and "succeeded" in body
    m = metrics(at)
    assert m["Best vs eager"] == "3.20x" and m["Best vs torch.compile"] == "2.00x" and m["Best time"] == "1.25 ms"
    assert m["Iterations"] == "3 / 5"
    assert m["Tokens"] == "2,100 / 750"
    # the timeline: functional F0 (build failed), F1, then optimization O2, newest selected
    timeline = [b for b in at.button if b.key.startswith("kf-it:")]
    assert [b.label.split()[0] for b in timeline] == ["F0", "F1", "O2"]
    assert [b.proto.type for b in timeline] == ["secondary", "secondary", "primary"]  # the newest is selected
    assert "Iteration #2" in body
    assert [t.label for t in at.tabs] == ["Program", "Diff", "Result", "Profile", "Analysis", "Model I/O"]
    assert len(at.get("plotly_chart")) == 1
    # program highlighted by pygments, kernel source shown separately with the target's lexer (cpp)
    assert 'class="kf-code"' in body and "Kernel source" in body
    # only the open tab is drawn (a live view redraws on every poll)
    assert "Changes against iteration #1" not in body and not at.dataframe
    assert "Parallelize the row loop" in open_tab(at, finished_run, "Analysis")  # recommendations that guided #2
    assert "Changes against iteration #1" in open_tab(at, finished_run, "Diff")  # the diff
    assert "Kernel source" not in texts(at)
    open_tab(at, finished_run, "Profile")
    assert "kforge::swish_bias" in str([df.value for df in at.dataframe])  # the profile table
    # the run inputs, drawn once their expander is opened
    assert "Swish with a bias" not in texts(at)
    at.session_state[f"kf-inputs:{finished_run}"] = True
    assert "Swish with a bias" in texts(at.run())


def test_an_unsupported_run_says_the_agent_cannot_write_it(app_env, use_targets):
    with open_store() as s:
        run_id = seed_unsupported_run(s)
    at = app(run=run_id).run()
    assert not at.exception
    assert "unsupported" in texts(at)
    assert any("cannot write this problem: nothing to synthesize" in i.value for i in at.info)
    assert not at.error and not any(b.label == "Resume" for b in at.button)
    assert "kept in PyTorch: cumsum" in open_tab(at, run_id, "Result")  # the coverage note of its iteration


def test_picking_an_iteration_shows_its_compile_error(finished_run, use_targets):
    at = app(run=finished_run).run()
    at.button(key=f"kf-it:{finished_run}:0").click().run()
    assert not at.exception
    body = texts(at)
    assert "Iteration #0" in body and "build failed" in body
    assert MARKER_PROGRAM in body  # the program's notes
    body = open_tab(at, finished_run, "Result")
    assert "expected &#x27;;&#x27; before &#x27;out&#x27;" in body or "expected ';' before 'out'" in body
    assert "Compiler output" in body
    # picking an older iteration stops following the newest
    at.run()
    assert "Iteration #0" in texts(at)


def test_unknown_run_says_so_in_place(app_env, use_targets):
    at = app(run="nosuchrun123").run()
    assert not at.exception
    assert "There is no run `nosuchrun123`" in texts(at)


def test_live_run_shows_streamed_output_then_stops_polling(app_env, use_targets):
    with open_store() as s:
        run_id = seed_live_run(s)
    at = app(run=run_id).run()
    assert not at.exception
    body = texts(at)
    assert "The generation agent is writing iteration #0" in body
    assert "Thinking about the kernel" in body
    assert any(b.label in ("Cancel run", "Cancelling…") for b in at.button)
    with open_store() as s:
        s.append_event(run_id, "program_extracted", {"iteration": 0, "code": "class ModelNew: pass\n",
                                                     "language": "python", "notes": ""}, 0)
        s.append_event(run_id, "verdict", {"iteration": 0, "verdict": {"status": "rejected",
                                                                        "reason": "no kernel launched"}}, 0)
        s.finish_iteration(run_id, 0, "rejected", reason="no kernel launched")
        s.finish_run(run_id, "failed", "no correct program was found")
    at.run()
    assert not at.exception
    body = texts(at)
    assert "is writing" not in body
    assert "no correct program was found" in body
    assert not any(b.label == "Cancel run" for b in at.button)


def test_cancel_button_requests_cancel(app_env, use_targets):
    with open_store() as s:
        run_id = seed_live_run(s)
    at = app(run=run_id).run()
    next(b for b in at.button if b.label == "Cancel run").click().run()
    assert not at.exception
    with open_store() as s:
        assert s.cancel_requested(run_id)
        assert any(e["kind"] == "cancel_requested" for e in s.events(run_id))


def test_every_event_kind_has_one_renderer():
    """Style rule 13: one renderer per event kind, shared by live and stored runs."""
    from app.renderers import RENDERERS

    assert EVENT_KINDS <= set(RENDERERS), f"no renderer for {sorted(EVENT_KINDS - set(RENDERERS))}"


def test_replay_equals_live_fold():
    """Folding the log in one go (a stored run) or in polls of any size (live) gives the same state."""
    from app.run_state import RunState, apply

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp) / "runs.db") as s:
        run_id = seed_finished_run(s)
        events = s.events(run_id)
    whole = apply(RunState(run_id), events)
    polled = RunState(run_id)
    for start in range(0, len(events), 3):
        apply(polled, events[start:start + 3] + events[max(0, start - 1):start])  # overlapping polls are ignored
    assert polled.last_seq == whole.last_seq == events[-1]["seq"]
    assert [vars(it) for it in polled.ordered] == [vars(it) for it in whole.ordered]
    assert [p["first_iteration"] for p in whole.passes] == [0, 2]
    # consecutive streamed chunks of one agent are one stream
    tokens = [e for e in whole.iterations[0].events if e["kind"] == "tokens"]
    assert len(tokens) == 1 and tokens[0]["data"]["text"].startswith("Here is a fused kernel")


def test_activity_log_shows_the_newest_entries(finished_run, use_targets):
    """A poll redraws the activity log, so it is capped: the newest entries, and how many earlier ones are hidden."""
    from app.run_state import RunState, apply
    from app.run_view import FEED_SHOWN

    with open_store() as s:
        for n in range(FEED_SHOWN):
            s.append_event(finished_run, "error", {"message": f"run-level error {n}", "where": "test"})
        feed = apply(RunState(finished_run), s.events(finished_run)).feed
    at = app(run=finished_run).run()
    assert not at.exception
    body = texts(at)
    assert f"{len(feed) - FEED_SHOWN} earlier entries not shown" in body
    assert f"run-level error {FEED_SHOWN - 1}" in body and "run-level error 0" in body  # 0 is among the newest 60


def test_wall_time_leaves_out_the_idle_gap_between_cancel_and_resume():
    import datetime as dt

    from app.run_state import RunState, apply
    from app.run_view import _wall_s

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

    def ev(seq, kind, minutes):
        return {"seq": seq, "kind": kind, "iteration": None, "data": {}, "ts": (t0 + dt.timedelta(minutes=minutes))
                .isoformat()}

    # 2 minutes of work, cancelled, 60 minutes idle, resumed, 3 more minutes of work
    state = apply(RunState("r"), [ev(1, "run_created", 0), ev(2, "run_finished", 2), ev(3, "run_resumed", 62),
                                  ev(4, "run_finished", 65)])
    run = {"created_at": t0.isoformat(), "finished_at": (t0 + dt.timedelta(minutes=65)).isoformat()}
    assert _wall_s(run, state, live=False) == 5 * 60
    # an old record with no session events: the span, as before
    assert _wall_s(run, RunState("r"), live=False) == 65 * 60


def test_activity_folds_iterations_that_ended_the_same_way():
    from app.run_state import collapse_repeats

    def fin(seq, index, status, reason):
        return {"seq": seq, "kind": "iteration_finished", "iteration": index,
                "data": {"index": index, "status": status, "reason": reason}}

    feed = [fin(1, 0, "correct", "ok"), fin(2, 1, "correct", "ok"), fin(3, 2, "no_program", "same"),
            fin(4, 3, "no_program", "same"), fin(5, 4, "no_program", "same"), fin(6, 5, "no_program", "other")]
    out = collapse_repeats(feed)
    assert [(e["data"]["index"], e["data"].get("first_index"), e["data"].get("repeats")) for e in out] == [
        (0, None, None), (1, None, None), (4, 2, 3), (5, None, None)]  # correct ones are never folded
    assert feed[2]["data"] == {"index": 2, "status": "no_program", "reason": "same"}  # the state is not changed


def test_run_cost_sums_each_calls_own_price():
    """A run whose analysis model is priced apart: the total is the sum of the calls' recorded costs, not all tokens
    at the generation price."""
    from app.run_state import RunState, apply

    state = RunState(run_id="r")
    events = [{"seq": 1, "kind": "usage", "data": {"tokens_prompt": 1000, "tokens_completion": 100, "cost": 0.5}},
              {"seq": 2, "kind": "usage", "data": {"tokens_prompt": 3000, "tokens_completion": 300, "cost": 0.25}}]
    apply(state, events)
    assert state.cost == 0.75 and state.tokens_prompt == 3000
    unpriced = RunState(run_id="u")
    apply(unpriced, [{"seq": 1, "kind": "usage", "data": {"tokens_prompt": 10, "tokens_completion": 1}}])
    assert unpriced.cost is None


def test_a_best_slower_than_eager_is_drawn_as_a_slowdown(app_env, use_targets):
    """Issue 26: where the best speedup is shown, a slowdown reads as one (red, arrow down, in words), and the
    finished run's warning (the loop's `slower_than_baseline` event) sits beside it; the activity log and the
    runs list say it too. A gain stays unmarked."""
    from streamlit.proto.Metric_pb2 import Metric

    from app.formatting import slowdown_delta, speedup_md
    from tests.browser.seed import seed_single_iteration_run

    assert slowdown_delta(1.2, "eager") == {} and slowdown_delta(None, "eager") == {} and speedup_md(1.5) == "**1.50x**"
    assert speedup_md(0.5) == ":red[**0.50x** (2.00x slower)]"
    message = "No kernel beats eager PyTorch: the best correct program (iteration 0) is 0.06x eager PyTorch"
    with open_store() as s:
        run_id = seed_single_iteration_run(s)  # correct, 16x slower than eager
        s.append_event(run_id, "slower_than_baseline", {
            "iteration": 0, "speedup_vs_eager": 0.0625, "speedup_vs_compiled": 0.039,
            "slower_than": ["eager", "torch.compile"], "use": "eager", "message": message}, 0)
    at = app(run=run_id).run()
    assert not at.exception
    eager, compiled = (next(m for m in at.metric if m.label == label)
                       for label in ("Best vs eager", "Best vs torch.compile"))
    assert eager.value == "0.06x" and eager.proto.delta == "16.00x slower than eager"
    assert eager.proto.color == Metric.MetricColor.RED and eager.proto.direction == Metric.MetricDirection.DOWN
    assert compiled.proto.delta == "25.60x slower than torch.compile" and compiled.proto.color == Metric.MetricColor.RED
    assert [e.value for e in at.error] == [message]  # the loop's own words, as an error beside the numbers
    body = texts(at)
    assert "correct, but slower than eager" in body  # the run's badge
    assert "Slower than eager and torch.compile" in body and "New best, still slower than eager" in body
    assert ":material/trophy:" not in body  # no trophy for a slowdown
    runs = app("runs").run()
    assert not runs.exception and "(16.00x slower)" in texts(runs)


def test_claims_of_the_candidates_process_are_named_as_such():
    """The verdict's fields the judge took from the candidate's process are listed in words, said to be claims."""
    from app.render_result import reported_text

    text = reported_text(["kernel_launches", "aten_ops", "profile"])
    assert "kernel launches, aten ops, profile" in text
    assert text.startswith("Reported by the candidate's process (not measured by the judge)")


def test_head_to_head_shows_each_contenders_spread_checks_and_warnings(finished_run, use_targets):
    """Issues 22 (item 5) and 20: where the run's head-to-head is drawn (the activity log), per contender its median,
    min, max and trials, the checks it passed and what the judge flagged; the judging, the noise bounds and the
    contest's own warnings beside it. The event is the loop's own (`loop.head_to_head.contest_event`)."""
    from app.render_activity import CONTEST_COLUMNS, contest_rows

    data, flag = head_to_head_data(), JUDGE_FLAG
    rows = contest_rows(data)
    assert [r["contender"] for r in rows] == ["#2 (best) — noisy", "#1", "eager", "torch.compile"]
    assert rows[0] == {"contender": "#2 (best) — noisy", "median": "1.25 ms", "min": "0.9 ms", "max": "1.3 ms",
                       "trials": "7", "vs eager": "3.20x", "vs compile": "2.00x",
                       "checks": "timed outputs match eager ✓, judge's clock ✓",
                       "warnings": "noisy timing (its timing, median 1.25 ms is 1.4x its fastest trial (0.9 ms; bound "
                                   "1.3x) over 7 trials): the machine was busy or the timing unstable; re-time before "
                                   "trusting this number"}
    assert rows[1]["warnings"] == flag and rows[1]["min"] == "2.4 ms"
    old = {**data, "contenders": [{k: v for k, v in data["contenders"][1].items() if k not in ("checks", "warnings")}]}
    assert (contest_rows(old)[0]["checks"], contest_rows(old)[0]["warnings"]) == ("not recorded", "not recorded")
    assert rows[2] == {"contender": "eager", "median": "4 ms", "min": "3.9 ms", "max": "4.1 ms", "trials": "7",
                       "vs eager": "", "vs compile": "", "checks": "", "warnings": ""}
    with open_store() as s:
        s.append_event(finished_run, "head_to_head", data)
    at = app(run=finished_run).run()
    assert not at.exception
    body = texts(at)
    assert "Head to head → best #2" in body and "best = the fastest median" in body
    assert "".join(f"<th>{c}</th>" for c in CONTEST_COLUMNS) in body
    assert ("<tr><td>#2 (best) — noisy</td><td>1.25 ms</td><td>0.9 ms</td><td>1.3 ms</td><td>7</td><td>3.20x</td>"
            "<td>2.00x</td></tr>") in body
    assert "<li><b>#2</b> checks: timed outputs match eager ✓, judge&#x27;s clock ✓<br>warnings: noisy timing" in body
    assert f"<li><b>#1</b> checks: timed outputs match eager ✓, judge&#x27;s clock ✓<br>warnings: {flag}</li>" in body
    assert any(c.value.startswith("Judged out of process: each contender ran in a process of its own")
               and "noisy if the median is over 1.3x the fastest trial" in c.value for c in at.caption)
    assert [w.value for w in at.warning if "re-timed" in w.value] == ["re-timed: the first was noisy (#2)"]
