"""The loop when the model's endpoint misbehaves (a real local OpenAI-protocol server, the real evaluator on the
CPU target, the real run store): replies without programs, server errors, refusals, context limits, Retry-After,
rate limits, a cancel or a silence mid-stream. Each fault ends an iteration as data or stops the run with its
reason; the record stays consistent.
"""

from __future__ import annotations

import threading
import time

from kforge_core.loop import CANCELLED_ITERATION_STATUS, cancel_run, create_run, execute_run, summarize_run
from kforge_core.loop.events import RunFinished
from kforge_core.store import open_store
from tests.fakes.openai_replies import empty_choices, image_rejected, rate_limited, server_error, slow, stall, truncated
from tests.fakes.openai_server import FakeOpenAIServer
from tests.loop_fixtures import (  # noqa: F401 - pytest fixtures
    PNG, RECS, assert_consistent, db, generation_prompt, make_config, no_user_llm_settings, of_kind, program,
    run_scripted, run_to_end, scripted, server, wait_for)


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
