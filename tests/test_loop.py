"""The synthesis loop end to end: a real local OpenAI-protocol server scripting the model, the real evaluator on
the CPU target (tiny problem), the real run store: the story of a run, what the prompts say, prices, a reply with
two programs, screenshots, and the run's configuration. Endpoint faults, the loop's own logic (scripted) and resumed
runs have files of their own.
"""

from __future__ import annotations

import pytest

from kforge_core.loop import RunConfig, create_run
from kforge_core.platform import get_platform
from kforge_core.store import open_store
from tests.fakes.openai_server import FakeOpenAIServer
from tests.loop_fixtures import (  # noqa: F401 - pytest fixtures
    FIXTURES, PNG, PROBLEM, RECS, SECRET, assert_consistent, db, generation_prompt, make_config, no_user_llm_settings,
    of_kind, offline_config, program, run_scripted, run_to_end, scripted, server, synthesize)


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
