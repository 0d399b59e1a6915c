"""kforge_core.llm's view of an endpoint (against tests/fakes/openai_server.py): its models, `check_endpoint`,
the endpoint redacted in messages, and the context window (learnt from the models listing, a refusal or a silent
truncation; issue 24).
"""

from __future__ import annotations

import pytest

from kforge_core.llm import (
    LLMBadResponseError, LLMClient, LLMConfig, LLMConnectionError, LLMRequestError, check_endpoint)
from kforge_core.llm.errors import redact_url
from tests.fakes.openai_replies import error, garbage, server_error
from tests.fakes.openai_server import fake_openai_server  # noqa: F401 - pytest fixture
from tests.llm_fixtures import HI, client, server  # noqa: F401 - pytest fixtures


# --------------------------------------------------------------------------------------------------- endpoint


def test_list_models(server, client):
    server.models[:] = ["qwen2.5-coder", "llama3.1", "qwen2.5-coder"]
    assert client.list_models() == ["qwen2.5-coder", "llama3.1"]
    server.models_reply = garbage({"models": ["a"]})
    with pytest.raises(LLMBadResponseError, match="GET /models"):
        client.list_models()


def test_endpoint_is_redacted_in_messages():
    assert redact_url("https://user:pw@host.example:8443/v1/?api-key=sk-zzz#x") == "https://host.example:8443/v1"
    cfg = LLMConfig(base_url="http://u:sk-in-url-123456@127.0.0.1:9/v1?key=abc", model="m", max_retries=0)
    with LLMClient(cfg) as c, pytest.raises(LLMConnectionError) as info:
        c.chat(HI)
    assert "127.0.0.1:9/v1" in str(info.value) and "sk-in-url" not in str(info.value) and "abc" not in str(info.value)


def test_check_endpoint_ok(server):
    server.models[:] = ["coder"]
    server.enqueue("ok")
    check = check_endpoint(server.llm_config(model="coder"))
    assert check.ok and check.error is None
    assert check.models == ["coder"] and check.model_listed is True
    assert check.reply == "ok" and check.latency_s is not None and check.latency_s > 0
    probe = server.chat_requests[-1]
    assert probe.json["max_tokens"] == 16 and not probe.stream


def test_check_endpoint_problems(server):
    # Model not listed: still tested, with a note.
    server.enqueue("ok")
    check = check_endpoint(server.llm_config(model="ghost"))
    assert check.ok and check.model_listed is False and "not in the endpoint's model list" in check.notes[0]
    # No model configured: the error lists what the server has.
    check = check_endpoint(server.llm_config(model=None))
    assert not check.ok and "fake-model" in check.error and check.error_type == "LLMConfigError"
    # /models not implemented: the chat call decides.
    server.models_reply = error(404, "Not Found")
    server.enqueue("ok")
    check = check_endpoint(server.llm_config())
    assert check.ok and check.models is None and check.model_listed is None
    # The test call fails: a clear error, no retry.
    server.models_reply = None
    server.enqueue(server_error(503, "loading model"), "unused")
    check = check_endpoint(server.llm_config())
    assert not check.ok and check.error_type == "LLMServerError" and "HTTP 503: loading model" in check.error
    # Nothing listening.
    cfg = server.llm_config()
    server.stop()
    check = check_endpoint(cfg)
    assert not check.ok and check.error_type == "LLMConnectionError" and cfg.base_url in check.error


# ------------------------------------------------------------------------------------- context windows (issue 24)


def test_context_window_from_models_listing_setting_and_default(server):
    from kforge_core.llm import DEFAULT_CONTEXT_TOKENS

    server.models = ["fake-model", "other"]
    server.model_info = {"fake-model": {"max_model_len": 8192}, "other": {"meta": {"n_ctx_train": 4096}}}
    with LLMClient(server.llm_config()) as c:
        assert c.context_window("fake-model") == 8192  # vLLM publishes it
        assert c.context_window("other") == 4096  # llama.cpp's meta
        assert c.context_window("unlisted") == DEFAULT_CONTEXT_TOKENS
    assert len([r for r in server.requests if r.path.endswith("/models")]) == 1  # asked once per client
    with LLMClient(server.llm_config(context_tokens=16384)) as c:
        assert c.context_window("fake-model") == 16384  # the setting wins


def test_context_window_without_a_models_endpoint_is_the_default(server):
    from kforge_core.llm import DEFAULT_CONTEXT_TOKENS

    server.models_reply = error(404, "not found")
    with LLMClient(server.llm_config()) as c:
        assert c.context_window() == DEFAULT_CONTEXT_TOKENS


def test_context_length_refusal_is_typed_and_teaches_the_window(server, client):
    from kforge_core.llm import LLMContextError

    server.context_limit = 1000
    with pytest.raises(LLMContextError) as info:
        client.chat([{"role": "user", "content": "x" * 8000}])
    err = info.value
    assert err.context_tokens == 1000 and err.status == 400 and isinstance(err, LLMRequestError)
    assert "does not fit the context window of 1000 tokens" in str(err)
    assert len(server.chat_requests) == 1  # not retried: the same prompt would be refused again
    assert client.context_window() == 2048  # learnt (never planned below the minimum window)


@pytest.mark.parametrize("message, window", [
    ("This model's maximum context length is 32768 tokens. However, you requested 42000 tokens", 32768),
    ("Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with context "
     "length of only 4096 tokens, which is not enough.", 4096),
    ("the request exceeds the available context size, try increasing it", None),
    ("<html>413 Request Entity Too Large</html>", None),
])
def test_context_refusals_of_other_servers(server, client, message, window):
    from kforge_core.llm import LLMContextError

    server.enqueue(error(413 if "413" in message else 400, message))
    with pytest.raises(LLMContextError) as info:
        client.chat(HI)
    assert info.value.context_tokens == window


def test_silent_truncation_is_warned_about_and_learnt(server, client):
    server.silent_context = 2048  # Ollama's way: no error, the prompt is cut
    server.enqueue("ok", "ok")
    result = client.chat([{"role": "user", "content": "y" * 40000}])
    assert result.prompt_tokens == 2048
    (warning,) = result.warnings
    assert "reported 2048 prompt tokens for a prompt estimated at 10000" in warning
    assert "OLLAMA_CONTEXT_LENGTH" in warning and "context_tokens" in warning
    assert client.context_window() == 2048
    assert client.chat(HI).warnings == ()  # a small prompt: nothing to say


def test_ollama_names_without_a_tag_are_served_as_latest():
    from kforge_core.llm.endpoint import is_served

    assert is_served("qwen3", ["qwen3:latest"]) and is_served("qwen3:8b", ["qwen3:8b"])
    assert not is_served("qwen3", ["qwen3:8b"]) and not is_served("qwen3:latest", ["qwen3"])


def test_check_endpoint_reports_the_context_window(server):
    from kforge_core.llm import DEFAULT_CONTEXT_TOKENS

    server.enqueue("ok")
    check = check_endpoint(server.llm_config(), test_call=True)
    assert check.ok and check.context_tokens == DEFAULT_CONTEXT_TOKENS
    assert any("does not say how long" in n and "OLLAMA_CONTEXT_LENGTH" in n for n in check.notes)
    server.model_info = {"fake-model": {"max_model_len": 8192}}
    check = check_endpoint(server.llm_config(), test_call=False)
    assert check.context_tokens == 8192 and not any("does not say" in n for n in check.notes)
