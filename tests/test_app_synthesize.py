"""The Synthesize form: every mistake a user can make is reported in place, in one sentence, never as a traceback;
a valid form starts a real run (a worker process) and attaches the page to it through ?run=."""

from __future__ import annotations

import time

import pytest

from kforge_core.store import open_store
from tests.browser.appkit import app, app_env, stop_run, texts, use_targets  # noqa: F401,F811 - fixtures
from tests.browser.scripted import PROBLEM
from tests.fakes.openai_server import FakeOpenAIServer


def paste(at, source: str):
    at.text_area(key="kf-paste").set_value(source).run()
    assert not at.exception
    return at


def start_button(at):
    return next(b for b in at.button if b.label == "Start synthesis")


def test_form_lists_targets_and_disables_unavailable_ones(app_env, use_targets):
    at = app().run()
    assert not at.exception
    available = at.radio(key="kf-target")
    assert available.value == "cpu" and "CPU (C++ / OpenMP)" in available.options
    unavailable = [t for t in use_targets if not t["available"]]
    if unavailable:
        disabled = at.radio(key="kf-target-unavailable")
        assert disabled.disabled and disabled.value is None
        assert sorted(disabled.options) == sorted(t["title"] for t in unavailable)
        assert all(t["reason"] in str(disabled.proto) for t in unavailable)  # each with the reason why
    # no endpoint configured: the built-in synthesizer is the default, labelled honestly
    assert at.radio(key="kf-agent").value == "builtin"
    assert "built-in, rule-based (no LLM)" in str(at.radio(key="kf-agent").proto)
    assert start_button(at).disabled  # nothing pasted yet


def test_syntax_error_is_reported_with_its_line(app_env, use_targets):
    at = paste(app().run(), "import torch\n\nclass Model(nn.Module):\n    def forward(self, x)\n        return x\n")
    message = " ".join(e.value for e in at.error)
    assert "line 4" in message and "syntax error" in message
    assert ">" in texts(at) and "def forward(self, x)" in texts(at)  # the offending line, marked
    assert start_button(at).disabled


def test_missing_functions_are_named(app_env, use_targets):
    at = paste(app().run(), "import torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                            "        return x\n")
    message = " ".join(e.value for e in at.error)
    assert "missing get_inputs, get_init_inputs" in message


def test_a_valid_module_is_accepted(app_env, use_targets):
    at = paste(app().run(), PROBLEM)
    assert not at.error
    assert any("Model, get_inputs and get_init_inputs found" in s.value for s in at.success)
    assert not start_button(at).disabled


def test_example_button_fills_the_module(app_env, use_targets):
    at = app().run()
    next(b for b in at.button if b.label == "Insert an example").click().run()
    assert "class Model" in at.text_area(key="kf-paste").value
    assert any("swish_bias" in s.value for s in at.success)


def test_unreachable_endpoint_is_reported_and_no_run_starts(app_env, use_targets):
    at = paste(app().run(), PROBLEM)
    at.radio(key="kf-agent").set_value("llm").run()
    at.text_input(key="kf-base-url").set_value("http://127.0.0.1:9/v1").run()  # discard port: refused
    at.text_input(key="kf-model").set_value("some-model").run()
    start_button(at).click().run()
    assert not at.exception
    assert any("Endpoint check failed" in e.value for e in at.error)
    with open_store() as s:
        assert s.count_runs() == 0


def test_wrong_key_is_reported(app_env, use_targets):
    with FakeOpenAIServer(api_key="the-right-key", models=("m",)) as server:
        at = paste(app().run(), PROBLEM)
        at.radio(key="kf-agent").set_value("llm").run()
        at.text_input(key="kf-base-url").set_value(server.base_url).run()
        at.text_input(key="kf-api-key").set_value("sk-wrong-key-123456").run()
        at.text_input(key="kf-model").set_value("m").run()
        start_button(at).click().run()
    errors = " ".join(e.value for e in at.error)
    assert "Endpoint check failed" in errors
    assert "sk-wrong-key-123456" not in errors  # the key is never echoed


def test_bad_endpoint_url_is_reported(app_env, use_targets):
    at = paste(app().run(), PROBLEM)
    at.radio(key="kf-agent").set_value("llm").run()
    at.text_input(key="kf-base-url").set_value("localhost:8000").run()
    at.text_input(key="kf-model").set_value("m").run()
    next(b for b in at.button if b.label == "Check endpoint").click().run()
    assert not at.exception
    assert any("must start with http:// or https://" in e.value for e in at.error)


def _start_one_step_run(budget_s: float | None = None):
    """The form filled for a one-step run (and a typed timing budget), started: (the app, the run's id)."""
    at = paste(app().run(), PROBLEM)
    at.number_input(key="kf-func-iters").set_value(1).run()
    at.number_input(key="kf-opt-iters").set_value(0).run()
    if budget_s is not None:
        at.number_input(key="kf-timing-budget").set_value(budget_s).run()
    start_button(at).click().run()
    assert not at.exception, at.exception
    run_id = at.query_params.get("run")
    assert run_id, texts(at)
    return at, run_id


def test_start_creates_a_run_and_attaches(app_env, use_targets):
    at, run_id = _start_one_step_run()
    try:
        with open_store() as s:
            run = s.get_run(run_id)
            assert run["agent"] == "builtin" and run["target"] == "cpu"
            assert run["config"]["max_functional_iters"] == 1
            # the timing budget left empty: the target's own (1 s on the CPU, `timing.options_for`), not a fixed 2 s
            assert run["config"]["eval_timing_options"] == {"min_trials": 10}, run["config"]["eval_timing_options"]
        assert "Synthesize a kernel" not in texts(at)  # the page now shows the run
    finally:
        stop_run(run_id)


def test_a_typed_timing_budget_is_the_runs(app_env, use_targets):
    _, run_id = _start_one_step_run(budget_s=3.5)
    try:
        with open_store() as s:
            assert s.get_run(run_id)["config"]["eval_timing_options"] == {"min_trials": 10, "budget_s": 3.5}
    finally:
        stop_run(run_id)


def test_llm_run_uses_the_typed_key_and_never_stores_it(app_env, use_targets):
    from tests.browser import scripted

    secret = "sk-test-secret-key-98765"
    with FakeOpenAIServer(api_key=secret, models=(scripted.GEN_MODEL, scripted.ANALYSIS_MODEL)) as server:
        server.responder = scripted.responder()
        at = paste(app().run(), PROBLEM)
        at.radio(key="kf-agent").set_value("llm").run()
        at.text_input(key="kf-base-url").set_value(server.base_url).run()
        at.text_input(key="kf-api-key").set_value(secret).run()
        at.text_input(key="kf-model").set_value(scripted.GEN_MODEL).run()
        at.text_input(key="kf-analysis-model").set_value(scripted.ANALYSIS_MODEL).run()
        at.number_input(key="kf-func-iters").set_value(1).run()
        at.number_input(key="kf-opt-iters").set_value(0).run()
        start_button(at).click().run()
        assert not at.exception
        run_id = at.query_params.get("run")
        assert run_id, texts(at)
        try:
            deadline = time.monotonic() + 60  # the worker's first model call proves the key reached it
            while not server.chat_requests and time.monotonic() < deadline:
                time.sleep(0.2)
            assert server.chat_requests and server.chat_requests[0].bearer == secret
        finally:
            stop_run(run_id)
    with open_store() as s:
        run = s.get_run(run_id)
        assert (run["agent"], run["model"], run["analysis_model"]) == ("llm", scripted.GEN_MODEL,
                                                                        scripted.ANALYSIS_MODEL)
    for path in app_env.glob("runs.db*"):  # the database and its WAL: the key is nowhere
        assert secret.encode() not in path.read_bytes()


@pytest.mark.parametrize("mode", ["Gallery"])
def test_gallery_problem_is_checked_too(app_env, use_targets, mode):
    at = app().run()
    at.get("button_group")[0].set_value(mode).run()
    assert not at.exception
    assert any("found" in s.value for s in at.success)
