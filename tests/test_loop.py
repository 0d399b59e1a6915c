"""The synthesis loop end to end: a real local OpenAI-protocol server scripting the model, the real evaluator on
the CPU target (tiny problem), the real run store; plus the loop's own logic with a scripted evaluator (patience,
budgets, best-of-k) where evaluating real programs would only cost time, and a real worker killed and resumed."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from kforge_core.agents.base import Usage
from kforge_core.loop import (CANCELLED_ITERATION_STATUS, LoopState, RunConfig, Synthesis, cancel_run, create_run,
                              execute_run, launch_worker, resume_run, summarize_run)
from kforge_core.loop.events import RunFinished
from kforge_core.platform import get_platform
from kforge_core.store import open_store
from kforge_core.eval.verdict import Timing, Verdict
from tests.fakes.openai_replies import empty_choices, image_rejected, rate_limited, server_error, slow, stall, truncated
from tests.fakes.openai_server import FakeOpenAIServer

FIXTURES = Path(__file__).parent / "fixtures_loop"
PROBLEM = (FIXTURES / "problem_relu.py").read_text()
FAST_TIMING = {"min_trials": 3, "max_trials": 5, "budget_s": 0.2}
SECRET = "sk-test-secret-key-0123456789"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
RECS = ('Measured: 400 repetitions per element.\n```json\n[{"title": "Drop the repeat loop", "change": "compute each '
        'element once", "why": "the kernel redoes the work 400 times", "expected_gain": "~100x"}]\n```')


@pytest.fixture(autouse=True)
def no_user_llm_settings(monkeypatch, tmp_path):
    """Only what a test configures: no endpoint, key or model from the developer's environment or settings."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL", "KFORGE_ANALYSIS_MODEL", "KFORGE_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KFORGE_SETTINGS", str(tmp_path / "no-settings.toml"))


@pytest.fixture
def server():
    with FakeOpenAIServer(models=("gen-model", "ana-model")) as s:
        yield s


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "runs.db"


def program(name: str, prose: str = "Here is the program.") -> str:
    return f"{prose}\n```python\n{(FIXTURES / name).read_text()}```\n"


def make_config(server: FakeOpenAIServer, **kw) -> RunConfig:
    values = dict(problem_source=PROBLEM, problem_name="relu", target="cpu", model="gen-model",
                  analysis_model="ana-model", base_url=server.base_url, eval_baselines=False,
                  eval_timing_options=FAST_TIMING, max_functional_iters=3, max_optimization_iters=0,
                  llm_options={"timeout_s": 5.0, "max_retries": 1, "retry_base_delay_s": 0.01,
                               "retry_max_delay_s": 0.05}, endpoint_backoff_s=0.01)
    values.update(kw)
    return RunConfig(**values)


def run_to_end(db: Path, config: RunConfig) -> tuple[str, list, dict, list[dict]]:
    """Create and execute a run; return (run_id, loop events, summary, stored events)."""
    with open_store(db) as store:
        run_id = create_run(store, config)
    seen: list = []
    execute_run(db, run_id, config, on_event=seen.append)
    with open_store(db) as store:
        return run_id, seen, summarize_run(store, run_id), store.events(run_id)


def of_kind(events: list[dict], kind: str, **where) -> list[dict]:
    return [e for e in events if e["kind"] == kind and all(e["data"].get(k) == v for k, v in where.items())]


def generation_prompt(events: list[dict], iteration: int) -> str:
    (event,) = of_kind(events, "prompt_sent", iteration=iteration, agent="generation")
    return "\n".join(m["content"] if isinstance(m["content"], str) else
                     "\n".join(p.get("text", "") for p in m["content"]) for m in event["data"]["messages"])


def assert_consistent(summary: dict, events: list[dict]) -> None:
    """The JSON summary and the stored events tell the same story."""
    finished = {e["data"]["index"]: e["data"] for e in of_kind(events, "iteration_finished")}
    assert sorted(finished) == [it["index"] for it in summary["iterations"]]
    for it in summary["iterations"]:
        assert finished[it["index"]]["status"] == it["status"]
        assert finished[it["index"]]["pass"] == it["pass"]
        assert finished[it["index"]]["candidate_ms"] == it["candidate_ms"]
        verdicts = of_kind(events, "verdict", iteration=it["index"])
        missing = of_kind(events, "program_missing", iteration=it["index"])
        assert len(verdicts) + len(missing) <= 1
        if verdicts:
            assert verdicts[0]["data"]["verdict"]["status"] == it["status"]
    (done,) = of_kind(events, "run_finished")
    assert done["data"]["status"] == summary["status"]
    assert events[-1]["kind"] == "run_finished"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


# ------------------------------------------------------------------------------------------------ the story


def test_story_compile_error_wrong_correct_then_faster(db):
    """The whole loop on the CPU target: a compile error, a wrong kernel, a correct (slow) one, recommendations,
    a faster one. The only test that times torch.compile baselines (the first compile of a problem is slow)."""
    with FakeOpenAIServer(models=("gen-model", "ana-model"), api_key=SECRET) as server:
        server.enqueue_for("gen-model", program("compile_error.py"), program("wrong.py"),
                           program("correct_slow.py"), program("correct_fast.py"))
        server.enqueue_for("ana-model", RECS)
        config = make_config(server, api_key=SECRET, max_functional_iters=4, max_optimization_iters=1,
                             eval_baselines=True)
        run_id, seen, summary, events = run_to_end(db, config)
        assert server.pending == 0

    assert summary["status"] == "succeeded", summary
    assert [(it["index"], it["pass"], it["status"]) for it in summary["iterations"]] == [
        (0, "functional", "compile_error"), (1, "functional", "incorrect"), (2, "functional", "correct"),
        (3, "optimization", "correct")]
    assert_consistent(summary, events)
    assert [e.kind for e in seen if e.kind not in ("tokens", "iteration_started")] == \
        [e["kind"] for e in events if e["kind"] not in ("tokens", "run_created")]  # one stream, two consumers

    # diffs between consecutive programs
    assert [(e["data"]["iteration"], e["data"]["against_iteration"]) for e in of_kind(events, "diff")] == \
        [(1, 0), (2, 1), (3, 2)]
    assert "-    for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0 ? x[i] : 0.0f\n" in \
        of_kind(events, "diff", iteration=1)[0]["data"]["unified_diff"]

    # the compile error, with its candidate line number, reached the next prompt
    (log,) = of_kind(events, "compile_log", iteration=0)
    assert "candidate line 9" in log["data"]["log"]
    prompt1 = generation_prompt(events, 1)
    assert "It did not compile" in prompt1 and "candidate line 9" in prompt1
    assert "It ran, but its output is wrong" in generation_prompt(events, 2)

    # the analysis read the best program's measurements; its recommendations reached the generation prompt
    (recs,) = of_kind(events, "recommendations")
    assert recs["iteration"] == 3 and recs["data"]["analyzed_iteration"] == 2
    assert [r["title"] for r in recs["data"]["recommendations"]] == ["Drop the repeat loop"]
    (analysis_prompt,) = of_kind(events, "prompt_sent", agent="analysis")
    analysis_text = analysis_prompt["data"]["messages"][1]["content"]
    assert "Profile summary" in analysis_text and "ms per forward" in analysis_text
    assert "400 times" in analysis_text  # the slow program's own comment: it is the program being analysed
    prompt3 = generation_prompt(events, 3)
    assert "Drop the repeat loop" in prompt3 and "fastest correct program so far" in prompt3

    # best updated to the faster one, then confirmed by the head-to-head re-timing of both correct programs
    # (issue 22: best means best); timings and profiles recorded
    assert [e["data"]["iteration"] for e in of_kind(events, "best_updated")] == [2, 3, 3]
    (contest,) = of_kind(events, "head_to_head")
    assert contest["data"]["best_iteration"] == 3 and not contest["data"]["error"]
    assert sorted(r["iteration"] for r in contest["data"]["contenders"]) == [2, 3]
    assert "head-to-head" in summary["best"]["chosen_by"]
    best = summary["best"]
    assert best["iteration"] == 3 and best["code"] == (FIXTURES / "correct_fast.py").read_text()
    assert best["candidate_ms"] < summary["iterations"][2]["candidate_ms"]
    assert best["speedup_vs_eager"] is not None and best["speedup_vs_compiled"] is not None
    (t3,) = of_kind(events, "timings", iteration=3)
    assert t3["data"]["compiled_ms"] and t3["data"]["torch_compile_s"] is not None
    assert {e["data"]["iteration"] for e in of_kind(events, "profile")} == {2, 3}
    assert of_kind(events, "pass_started")[0]["data"] == {"pass": "functional", "max_iterations": 4}
    assert of_kind(events, "pass_started")[1]["data"] == {"pass": "optimization", "max_iterations": 1}

    # tokens streamed per agent, usage accounted per call, run totals match
    assert {e["data"]["agent"] for e in of_kind(events, "tokens")} == {"generation", "analysis"}
    usage = of_kind(events, "usage")
    assert len(usage) == 5 and sum(u["data"]["prompt_tokens"] for u in usage) == summary["tokens"]["prompt"]

    # the API key is nowhere in the store (rows, events, WAL)
    raw = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    assert SECRET.encode() not in raw
    with open_store(db) as store:
        assert "api_key" not in store.get_run(run_id)["config"]


# ------------------------------------------------------------------------------------------------ faults


def test_replies_without_programs_and_endpoint_faults_are_failed_iterations(db, server):
    """Timeout, truncated stream, empty choices, no code block: each ends its iteration as no_program with the
    reason recorded; the model's own mistake is fed back to it; no evaluation runs. Endpoint failures use up no
    functional step: two steps take five iterations here."""
    server.enqueue_for(
        "gen-model",
        slow(3.0), slow(3.0),                                           # timeout, and its one retry
        "I will not write code today.",                                 # the model's mistake: no code block
        truncated(program("correct_fast.py"), after_chunks=8),          # stream dropped after some text
        empty_choices(),                                                # 200 with no choices
        "Still no code.",                                               # the model's second mistake
    )
    config = make_config(server, max_functional_iters=2, llm_options={"timeout_s": 0.5, "max_retries": 1,
                                                                      "retry_base_delay_s": 0.01})
    run_id, seen, summary, events = run_to_end(db, config)

    assert summary["status"] == "failed" and "no correct program in 2" in summary["error"]
    assert [it["status"] for it in summary["iterations"]] == ["no_program"] * 5
    assert_consistent(summary, events)
    reasons = [it["reason"] for it in summary["iterations"]]
    assert "the model endpoint failed" in reasons[0] and "did not answer within 0.5 s" in reasons[0]
    assert "no code block" in reasons[1]
    assert "stream" in reasons[2] and "the model endpoint failed" in reasons[2]
    assert "no choices" in reasons[3]
    assert "no code block" in reasons[4]
    # partial text of the broken stream is kept for the user, and what it cost is recorded (estimated)
    (missing2,) = of_kind(events, "program_missing", iteration=2)
    assert missing2["data"]["reply_excerpt"].startswith("Here is the program.")
    (broken,) = [u for u in of_kind(events, "usage") if u["iteration"] == 2]
    assert broken["data"]["failed"] and broken["data"]["estimated"] and broken["data"]["completion_tokens"] > 0
    # the model's mistake (iteration 1) is fed back at iteration 2; endpoint failures are not blamed on it
    assert "The reply held no usable program: the reply has no code block" in generation_prompt(events, 2)
    assert "What its evaluation said" not in generation_prompt(events, 1)
    assert {e["data"]["where"] for e in of_kind(events, "error")} == {"generation"}
    assert not of_kind(events, "verdict")
    assert server.pending == 0


def test_repeated_server_errors_stop_the_run_with_the_reason(db, server):
    server.enqueue_for("gen-model", *[server_error()] * 6)  # 3 iterations x (1 try + 1 retry)
    config = make_config(server, max_functional_iters=5, max_endpoint_failures=3)
    run_id, seen, summary, events = run_to_end(db, config)
    assert summary["status"] == "failed"
    assert "failed 3 times in a row" in summary["error"] and "HTTP 500" in summary["error"]
    assert "resume the run later" in summary["error"]
    assert len(summary["iterations"]) == 3
    assert_consistent(summary, events)
    assert server.pending == 0
    # the loop waited between the failures (doubling), and said so
    waits = of_kind(events, "retry", where="loop")
    assert [w["data"]["delay_s"] for w in waits] == [0.01, 0.02]
    # the client's own retries are events too
    assert len(of_kind(events, "retry", where="client")) == 3
    assert seen[-1].kind == "run_finished" and seen[-1].endpoint_failure


def test_a_refusal_that_cannot_change_stops_at_once(db):
    with FakeOpenAIServer(models=("gen-model",), api_key="sk-the-right-key-000000") as server:
        config = make_config(server, api_key="sk-a-wrong-key-11111111")
        run_id, seen, summary, events = run_to_end(db, config)
    assert summary["status"] == "failed" and "401" in summary["error"]
    assert len(summary["iterations"]) == 1 and "sk-a-wrong-key-11111111" not in str(events)


# Issue 24's endpoint scenarios: the real LLM agents against the fake server, the real store, a scripted evaluator
# (these are about the loop's handling of the endpoint; real evaluations would only add seconds).


def scripted(ms: float | None = None, compile_error: bool = False, prose: str = "Here.") -> str:
    mark = "# compile_error" if compile_error else f"# ms={ms}"
    return f"{prose}\n```python\n{mark}\nclass ModelNew:\n    pass\n```\n"


def run_scripted(db: Path, config: RunConfig) -> tuple[str, list, dict, list[dict]]:
    """Like run_to_end, with the scripted evaluator."""
    from kforge_core.agents.factory import build_agents
    from kforge_core.loop.runs import StoreRecorder

    with open_store(db) as store:
        run_id = create_run(store, config)
        store.start_run(run_id)
        generation, analysis = build_agents(config)
        recorder, seen = StoreRecorder(store, run_id), []
        try:
            for event in Synthesis(config, generation, analysis, evaluate_fn=scripted_evaluate).events():
                recorder.record(event)
                seen.append(event)
        finally:
            recorder.close()
        return run_id, seen, summarize_run(store, run_id), store.events(run_id)


def test_a_smaller_context_than_planned_never_fails_a_run_holding_a_correct_program(db, server):
    """After iteration 0 is correct, the server turns out to hold a small context (a 32 K server and a prompt that
    grew). Its context-length 400s cost the analysis (no recommendations) and the generation (a failed generation)
    but never the run."""
    def correct_then_shrink(request):
        server.context_limit = 300  # every later prompt is too long for it
        return scripted(1.0)

    server.enqueue_for("gen-model", correct_then_shrink)
    run_id, seen, summary, events = run_scripted(db, make_config(server, max_optimization_iters=1))

    assert summary["status"] == "succeeded" and summary["best"]["iteration"] == 0
    assert [it["status"] for it in summary["iterations"]] == ["correct", "no_program"]
    assert_consistent(summary, events)
    (recs,) = of_kind(events, "recommendations")
    assert recs["data"]["recommendations"] == [] and "did not fit the model's context" in recs["data"]["notes"]
    assert "did not fit the model's context even clipped" in summary["iterations"][1]["reason"]
    assert not of_kind(events, "error")  # no endpoint failure: the prompt's size, handled
    # nothing in the optimization prompt could be clipped further: it was not sent a second time
    assert len([r for r in server.chat_requests if r.model == "gen-model"]) == 2


def test_a_prompt_refused_for_its_length_is_clipped_sent_again_and_recorded(db, server):
    server.context_limit = 4000
    server.enqueue_for("gen-model", scripted(1.0))
    config = make_config(server, max_functional_iters=1, reference_program="# the CUDA one\n" + "y = 1\n" * 5000,
                         reference_target="cuda")
    run_id, seen, summary, events = run_scripted(db, config)
    assert summary["status"] == "succeeded"
    full, clipped = of_kind(events, "prompt_sent", iteration=0, agent="generation")
    size = [sum(len(m["content"]) for m in p["data"]["messages"]) for p in (full, clipped)]
    assert size[1] < size[0] and size[1] // 4 <= 4000
    (extracted,) = of_kind(events, "program_extracted", iteration=0)
    assert "did not fit the model's context; it was clipped" in extracted["data"]["notes"]


def test_a_retry_after_is_waited_for_by_the_loop_and_costs_no_functional_step(db, server):
    """The client does not wait 0.3 s itself (max_retry_after_s 0.1); the loop does, then goes on; the failed call
    uses up none of the single functional step."""
    server.enqueue_for("gen-model", rate_limited(retry_after=0.3), scripted(1.0))
    config = make_config(server, llm_options={"timeout_s": 5.0, "max_retries": 1, "max_retry_after_s": 0.1},
                         max_functional_iters=1)
    run_id, seen, summary, events = run_scripted(db, config)
    assert summary["status"] == "succeeded" and summary["best"]["iteration"] == 1
    (wait,) = of_kind(events, "retry", where="loop")
    assert wait["data"]["delay_s"] == 0.3 and "HTTP 429" in wait["data"]["error"]
    assert server.chat_requests[1].time - server.chat_requests[0].time >= 0.3


def test_a_retry_after_longer_than_the_run_may_wait_stops_it_keeping_the_best(db, server):
    server.enqueue_for("gen-model", scripted(2.0), rate_limited(retry_after=120))
    server.enqueue_for("ana-model", RECS)
    config = make_config(server, max_optimization_iters=3, endpoint_max_wait_s=5.0,
                         llm_options={"timeout_s": 5.0, "max_retries": 1})
    run_id, seen, summary, events = run_scripted(db, config)
    assert summary["status"] == "succeeded" and summary["best"]["iteration"] == 0
    assert "asks to wait 120 s" in seen[-1].stop_reason and "resume the run later" in seen[-1].stop_reason
    assert seen[-1].endpoint_failure
    assert [it["status"] for it in summary["iterations"]] == ["correct", "no_program"]
    assert "rate limiting" in summary["iterations"][1]["reason"]  # the iteration says why, not "cancelled"
    endpoint_error, stop = [e["data"]["message"] for e in of_kind(events, "error")]
    assert "HTTP 429" in endpoint_error and "HTTP 429" not in stop  # each said once
    assert_consistent(summary, events)


def test_each_call_is_priced_at_its_agents_price(db, server):
    server.enqueue_for("gen-model", scripted(2.0), scripted(1.0))
    server.enqueue_for("ana-model", RECS)
    config = make_config(server, max_optimization_iters=1, llm_options={
        "timeout_s": 5.0, "price_per_mtok": (10.0, 30.0), "analysis_price_per_mtok": (1.0, 2.0)})
    run_id, seen, summary, events = run_scripted(db, config)
    usage = of_kind(events, "usage")
    for u in usage:
        d = u["data"]
        prompt_price, completion_price = (1.0, 2.0) if d["agent"] == "analysis" else (10.0, 30.0)
        assert d["cost"] == pytest.approx((prompt_price * d["prompt_tokens"]
                                           + completion_price * d["completion_tokens"]) / 1e6)
    assert {u["data"]["agent"] for u in usage} == {"generation", "analysis"}
    assert summary["tokens"]["cost"] == pytest.approx(sum(u["data"]["cost"] for u in usage))
    assert summary["tokens"]["estimated"] is False


def test_what_the_prompts_tell_the_models_over_real_http(db, server):
    """Item 7 end to end: the optimization prompts (as the server received them) leave out the example, say how
    candidates are judged, which recommendation the last attempt followed and what came of it; the analysis
    agent sees the rules and the compile helper."""
    server.enqueue_for("gen-model", scripted(2.0), scripted(3.0), scripted(1.0))
    server.enqueue_for("ana-model", RECS, RECS)
    run_id, seen, summary, events = run_scripted(db, make_config(server, max_optimization_iters=2, patience=0))
    assert [it["status"] for it in summary["iterations"]] == ["correct"] * 3 and summary["best"]["iteration"] == 2
    example = get_platform("cpu").spec().example_candidate.strip()
    first, second, third = [r.prompt for r in server.chat_requests if r.model == "gen-model"]
    assert example in first and example not in second and example not in third
    assert "## How it is judged" in first and "Outputs must match the reference" in first
    assert ('Your latest attempt (iteration 1), which followed the recommendation(s) "Drop the repeat loop", was '
            "correct but not faster (3 ms)") in third
    assert "iteration 1: Drop the repeat loop -> correct, 3 ms vs 2 ms before" in third
    analysis = [r for r in server.chat_requests if r.model == "ana-model"][0]
    assert "from platforms.cpu import compile_cpp" in analysis.messages[0]["content"]
    assert "No threads, subprocesses" in analysis.messages[0]["content"]


def test_two_programs_in_a_reply_the_one_that_compiles_is_evaluated(db, server):
    """The reply's final program does not compile, its first one does: the first is evaluated. The reply's
    <think> block is set apart: stored as thinking tokens, never evaluated."""
    reply_text = ("<think>Plan: ```python\nclass ModelNew: half a draft</think>"
                  + scripted(1.0, prose="First:") + scripted(compile_error=True, prose="Second, fancier:"))
    server.enqueue_for("gen-model", reply_text)
    run_id, seen, summary, events = run_scripted(db, make_config(server, max_functional_iters=1))
    assert summary["status"] == "succeeded", summary
    (it,) = summary["iterations"]
    assert it["status"] == "correct" and "# ms=1.0" in summary["best"]["code"]
    extracted = of_kind(events, "program_extracted", iteration=0)
    assert ["# compile_error" in e["data"]["code"] for e in extracted] == [True, False]
    assert "did not compile" in extracted[1]["data"]["notes"]
    thinking = "".join(e["data"]["text"] for e in of_kind(events, "tokens", thinking=True))
    answer = "".join(e["data"]["text"] for e in of_kind(events, "tokens") if not e["data"].get("thinking"))
    assert "half a draft" in thinking and "half a draft" not in answer and "Second, fancier" in answer


def test_screenshots_go_only_to_the_first_analysis(tmp_path):
    shot = tmp_path / "profiler.png"
    shot.write_bytes(PNG)
    events, agent = synthesize(offline_config(screenshots=[str(shot)], patience=0, max_optimization_iters=2),
                               ["# ms=3", "# ms=2", "# ms=1"])
    analyses = [c for c in agent.calls if hasattr(c, "screenshots")]
    assert [len(a.screenshots) for a in analyses] == [1, 0]
    assert "taken before this run" in analyses[0].screenshots_note


def test_rate_limit_then_success_and_screenshots_a_model_rejects(db, server, tmp_path):
    shot = tmp_path / "profiler.png"
    shot.write_bytes(PNG)
    server.enqueue_for("gen-model", rate_limited(retry_after=0), program("correct_slow.py"),
                       "No program this time, sorry.")
    server.enqueue_for("ana-model", image_rejected(), RECS)
    config = make_config(server, max_optimization_iters=2, patience=1, screenshots=[str(shot)])
    run_id, seen, summary, events = run_to_end(db, config)

    assert server.pending == 0
    assert summary["status"] == "succeeded" and summary["best"]["iteration"] == 0
    assert [it["status"] for it in summary["iterations"]] == ["correct", "no_program"]
    assert_consistent(summary, events)
    (recs,) = of_kind(events, "recommendations")
    assert "rejected the 1 profiler screenshot(s)" in recs["data"]["notes"]
    assert recs["data"]["recommendations"][0]["title"] == "Drop the repeat loop"
    analysis_requests = [r for r in server.chat_requests if r.model == "ana-model"]
    assert analysis_requests[0].image_urls and not analysis_requests[1].image_urls
    # the stored prompt does not carry the image bytes
    (analysis_prompt,) = of_kind(events, "prompt_sent", agent="analysis")
    parts = analysis_prompt["data"]["messages"][1]["content"]
    assert parts[1]["image_url"]["url"].startswith("[image/png,") and "base64" not in str(parts)
    assert "patience: 1" in next(e for e in seen if isinstance(e, RunFinished)).stop_reason


def test_cancel_while_the_model_streams_leaves_a_consistent_record(db, server):
    server.enqueue_for("gen-model", stall(program("correct_fast.py"), after_chunks=3, seconds=4.0))
    config = make_config(server)
    with open_store(db) as store:
        run_id = create_run(store, config)

    def on_event(event):
        if event.kind == "tokens":
            cancel_run(db, run_id)

    t0 = time.monotonic()
    status = execute_run(db, run_id, config, on_event=on_event)
    assert status == "cancelled" and time.monotonic() - t0 < 3.5  # did not wait for the stalled stream
    with open_store(db) as store:
        summary, events = summarize_run(store, run_id), store.events(run_id)
    assert [(it["status"], it["finished"]) for it in summary["iterations"]] == [(CANCELLED_ITERATION_STATUS, True)]
    assert "stopped before a verdict (cancelled)" in summary["iterations"][0]["reason"]
    assert of_kind(events, "cancel_requested") and of_kind(events, "tokens")
    assert_consistent(summary, events)


def test_text_streamed_before_the_model_goes_silent_is_stored_during_the_silence(db, server):
    """The recorder writes buffered text once it has waited, not only when more text (or another event) comes."""
    reply = program("correct_fast.py")
    server.enqueue_for("gen-model", stall(reply, after_chunks=3, seconds=300.0))
    # a read timeout longer than the wait below, so the silence cannot end before the text has to be seen
    config = make_config(server, llm_options={"timeout_s": 120.0, "max_retries": 0})
    sent = reply[:3 * 4]  # three chunks of the fake server's four characters each
    with open_store(db) as store:
        run_id = create_run(store, config)
    outcome: list = []
    runner = threading.Thread(target=lambda: outcome.append(execute_run(db, run_id, config)), daemon=True)
    runner.start()
    try:
        with open_store(db) as store:
            def streamed() -> str:
                return "".join(e["data"]["text"] for e in of_kind(store.events(run_id), "tokens"))

            wait_for(lambda: streamed() == sent, timeout_s=60, what="the text sent before the silence")
            events = store.events(run_id)
            # still inside the silence: the call has neither failed nor been retried, the iteration is open
            assert not of_kind(events, "iteration_finished") and not of_kind(events, "error")
            assert len(server.chat_requests) == 1 and store.get_run(run_id)["status"] == "running"
    finally:
        cancel_run(db, run_id)
        runner.join(timeout=120)
    assert outcome == ["cancelled"]
    with open_store(db) as store:
        events = store.events(run_id)
    assert events[-1]["kind"] == "run_finished"  # nothing was written after the run's end
    assert "".join(e["data"]["text"] for e in of_kind(events, "tokens")) == sent


# ------------------------------------------------------------------------------------------------ loop logic
# A scripted evaluator: the loop's decisions (best, patience, budgets, best-of-k) do not depend on how a verdict
# was produced, and real evaluations would only add seconds.


class ScriptedAgent:
    """A generation/analysis agent without a model: replies are programs named by their median ms."""

    label = "scripted"

    def __init__(self, programs: list[str | None], tokens: int = 10):
        self.programs, self.tokens, self.calls = list(programs), tokens, []  # programs[i]: iteration i's reply
        self._lock = threading.Lock()

    def generate(self, request, on_token=None):
        from kforge_core.agents.base import GenerationResult

        with self._lock:  # best-of-k calls come from several threads at once
            self.calls.append(request)
        code = self.programs[request.iteration]  # by iteration: the threads' order is not deterministic
        if on_token:
            on_token(code or "nothing")
        return GenerationResult(program=code, reply_text=code or "", error=None if code else "no code block",
                                usage=Usage(self.tokens, self.tokens))

    def analyze(self, request, on_token=None):
        from kforge_core.agents.base import AnalysisResult, Recommendation

        self.calls.append(request)
        return AnalysisResult([Recommendation("Try", "something", "because")], text="try something",
                              usage=Usage(self.tokens, self.tokens))


def scripted_evaluate(problem, code, target, options):
    """`# ms=1.5` -> correct at 1.5 ms; `# wrong` -> incorrect."""
    if "# wrong" in code:
        return Verdict("incorrect", "values differ", target)
    if "# compile_error" in code:
        return Verdict("compile_error", "did not compile", target, compile_log="candidate line 2: error")
    ms = float(code.split("ms=")[1].split()[0])
    return Verdict("correct", "ok", target, candidate=Timing(ms, ms, ms, 3), eager=Timing(1.0, 1.0, 1.0, 3))


def synthesize(config: RunConfig, programs: list, **kw) -> tuple[list, ScriptedAgent]:
    agent = ScriptedAgent(programs)
    loop = Synthesis(config, agent, agent, evaluate_fn=scripted_evaluate, **kw)
    return list(loop.events()), agent


def offline_config(**kw) -> RunConfig:
    values = dict(problem_source=PROBLEM, problem_name="relu", target="cpu", agent="builtin",
                  max_functional_iters=3, max_optimization_iters=5, patience=2)
    values.update(kw)
    return RunConfig(**values)


def kinds(events: list, kind: str) -> list:
    return [e for e in events if e.kind == kind]


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


# ------------------------------------------------------------------------------------------------ resume


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_killed_worker_is_resumed_from_its_last_finished_iteration(db, tmp_path):
    """A real `python -m kforge_core.loop.worker`, SIGKILLed while the model streams iteration 1; the run is marked
    interrupted and resumed here, reading its state from the store (nothing finished is redone)."""
    with FakeOpenAIServer(models=("gen-model", "ana-model"), api_key=SECRET) as server:
        server.enqueue_for("gen-model", program("compile_error.py"),
                           stall(program("wrong.py"), after_chunks=4, seconds=120.0))
        # a read timeout longer than the test's wait, so the stalled stream is still open when the kill comes
        config = make_config(server, api_key=SECRET, max_functional_iters=3, llm_options={"timeout_s": 60.0})
        with open_store(db) as store:
            run_id = create_run(store, config)
        pid = launch_worker(db, run_id, config, log_path=tmp_path / "worker.log")
        try:
            with open_store(db) as store:
                wait_for(lambda: of_kind(store.events(run_id), "prompt_sent", iteration=1), timeout_s=120,
                         what=f"the worker to reach iteration 1 (log: {tmp_path / 'worker.log'})")
                wait_for(lambda: len(server.chat_requests) == 2, timeout_s=10, what="the second model call")
                time.sleep(0.3)  # inside the stalled stream
                assert store.get_run(run_id)["status"] == "running"
                assert store.get_run(run_id)["worker_pid"] == pid
        finally:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _reaped(pid), 10, "the killed worker to disappear")

        with open_store(db) as store:
            assert store.mark_interrupted_runs() == [run_id]
            assert store.get_run(run_id)["status"] == "interrupted"
            assert store.last_completed_iteration(run_id) == 0
        server.enqueue_for("gen-model", program("correct_fast.py"))
        status = resume_run(db, run_id, make_config(server, api_key=SECRET, max_functional_iters=3))
        assert status == "succeeded"

    with open_store(db) as store:
        summary, events = summarize_run(store, run_id), store.events(run_id)
    assert [(it["index"], it["status"]) for it in summary["iterations"]] == [(0, "compile_error"), (1, "correct")]
    assert len(of_kind(events, "verdict", iteration=0)) == 1  # iteration 0 was not redone
    assert of_kind(events, "run_interrupted")[0]["data"]["reason"] == "worker_dead"
    assert of_kind(events, "run_resumed")[0]["data"]["from_iteration"] == 0
    assert len(of_kind(events, "pass_started")) == 1  # the functional pass was not started twice
    # the state came back from the store: the resumed prompt carries iteration 0's compile error
    prompts = of_kind(events, "prompt_sent", iteration=1, agent="generation")
    assert len(prompts) == 2 and "candidate line 9" in str(prompts[-1]["data"]["messages"])
    assert summary["best"]["iteration"] == 1
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def _reaped(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)  # our child: reap it so it is not a zombie
    except ChildProcessError:
        return True
    return finished == pid


# ------------------------------------------------------------------------------------------------ config


def test_config_record_has_no_secrets_and_round_trips(db, server):
    config = make_config(server, api_key=SECRET, base_url="https://user:pw@llm.example.com/v1?key=abc",
                         reference_program="# cuda version", reference_target="cuda")
    record = config.to_record()
    assert "api_key" not in record and record["base_url"] == "https://llm.example.com/v1"
    assert "problem_source" not in record and "reference_program" not in record
    with open_store(db) as store:
        run_id = create_run(store, config)
        back = RunConfig.from_run(store.get_run(run_id), api_key="k2", max_functional_iters=9)
    assert back.problem_source == PROBLEM and back.reference_program == "# cuda version"
    assert back.api_key == "k2" and back.max_functional_iters == 9 and back.llm_options == config.llm_options


@pytest.mark.parametrize("bad, message", [
    (dict(agent="magic"), "agent must be one of"),
    (dict(best_of_k=0), "best_of_k"),
    (dict(reference_program="x"), "reference program needs its target"),
    (dict(screenshots=["/no/such.png"]), "cannot read screenshot"),
    (dict(llm_options={"api_key": "x"}), "llm_options"),
    (dict(max_functional_iters=0), "max_functional_iters"),
])
def test_invalid_configs_are_usage_errors(server, bad, message):
    from kforge_core.errors import UsageError

    with pytest.raises(UsageError, match=message):
        make_config(server, **bad).validate()


def test_a_model_the_endpoint_does_not_serve_stops_the_run_naming_the_served_ones(db, server):
    """The app creates runs without the CLI's check: the 404 names the served models, once, and ends the run."""
    from tests.fakes.openai_replies import error

    server.enqueue_for("gen-model", error(404, "The model `gen-model` does not exist", code="model_not_found"))
    server.models = ["other-model", "ana-model"]
    run_id, seen, summary, events = run_scripted(db, make_config(server))
    assert summary["status"] == "failed"
    assert "is not among the models it serves: other-model, ana-model" in summary["error"]
    assert len(of_kind(events, "error")) == 1


def test_a_resume_flag_adds_to_the_stored_llm_options():
    run = {"config": {"llm_options": {"timeout_s": 5.0}}, "problem_source": PROBLEM, "problem_name": "relu",
           "target": "cpu"}
    config = RunConfig.from_run(run, llm_options={"context_tokens": 8192})
    assert config.llm_options == {"timeout_s": 5.0, "context_tokens": 8192}


def test_a_resumed_run_gives_back_the_steps_its_endpoint_failed(db, server):
    """Restored from the store: iterations the endpoint failed used up no step (as in the running loop)."""
    from kforge_core.loop.state import restore_state

    server.enqueue_for("gen-model", server_error(), "No code, sorry.", server_error(), server_error())
    config = make_config(server, max_functional_iters=3, max_endpoint_failures=2,
                         llm_options={"timeout_s": 5.0, "max_retries": 0})
    run_id, seen, summary, events = run_scripted(db, config)
    assert [it["status"] for it in summary["iterations"]] == ["no_program"] * 4  # failed, judged, failed, failed
    assert "failed 2 times in a row" in summary["error"]
    with open_store(db) as store:
        state = restore_state(store, run_id, config)
    assert state.functional_steps == 1 and state.next_iteration == 4
