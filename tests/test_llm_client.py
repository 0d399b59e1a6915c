"""kforge_core.llm against a real local HTTP server speaking the OpenAI protocol (tests/fakes/openai_server.py).

Timeouts and retry delays are tiny so that the file runs in a few seconds; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import base64
import time

import pytest

from kforge_core.errors import KForgeError
from kforge_core.llm import (
    PLACEHOLDER_API_KEY,
    LLMAuthError,
    LLMBadResponseError,
    LLMClient,
    LLMConfig,
    LLMConfigError,
    LLMConnectionError,
    LLMError,
    LLMImageError,
    LLMImagesUnsupportedError,
    LLMRateLimitError,
    LLMRequestError,
    LLMServerError,
    LLMStreamError,
    LLMTimeoutError,
    check_endpoint,
    image_message,
    is_configured,
    resolve_config,
    sniff_image_type,
)
from kforge_core.llm.errors import redact_url
from kforge_core.llm.retry import backoff_delay, parse_retry_after
from tests.fakes.openai_server import (
    FakeOpenAIServer,
    empty_choices,
    error,
    garbage,
    fake_openai_server,  # noqa: F401 - pytest fixture
    image_rejected,
    no_usage,
    rate_limited,
    reply,
    server_error,
    slow,
    stall,
    truncated,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 16
JPEG = b"\xff\xd8\xff\xe0" + b"\x00\x10JFIF\x00" + b"\x00" * 16
GIF = b"GIF89a" + b"\x00" * 16
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server(fake_openai_server):  # noqa: F811 - the imported fixture
    return fake_openai_server


@pytest.fixture
def client(server):
    with LLMClient(server.llm_config()) as c:
        yield c


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No LLM variables from the developer's shell, and no real settings file."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL", "KFORGE_ANALYSIS_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KFORGE_SETTINGS", str(tmp_path / "absent.toml"))
    return monkeypatch


def assert_clean_message(err: Exception, *, endpoint: str) -> None:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text
    assert endpoint in text
    assert err.__cause__ is None and err.__suppress_context__


# --------------------------------------------------------------------------------------------------- replies


def test_plain_json_reply(server, client):
    server.enqueue(reply("hello there", prompt_tokens=12, completion_tokens=3))
    tokens: list[str] = []
    result = client.chat(HI, stream=False, on_token=tokens.append)
    assert result.text == "hello there" and tokens == ["hello there"]
    assert result.finish_reason == "stop" and not result.truncated
    assert (result.prompt_tokens, result.completion_tokens, result.usage_estimated) == (12, 3, False)
    assert result.attempts == 1 and result.model == "fake-model" and result.latency_s > 0
    req = server.chat_requests[-1]
    assert req.model == "fake-model" and req.messages == HI and not req.stream
    assert req.bearer == PLACEHOLDER_API_KEY  # a local server without a key still gets a well-formed header


def test_streaming_forwards_tokens_in_order_with_usage(server, client):
    text = "The quick brown fox jumps over the lazy dog"
    server.enqueue(reply(text, chunk_chars=5, prompt_tokens=21, completion_tokens=9))
    tokens: list[str] = []
    result = client.chat(HI, on_token=tokens.append)
    assert tokens == [text[i : i + 5] for i in range(0, len(text), 5)]
    assert result.text == text and result.finish_reason == "stop"
    assert (result.prompt_tokens, result.completion_tokens, result.usage_estimated) == (21, 9, False)
    assert result.first_token_s is not None and result.first_token_s <= result.latency_s
    req = server.chat_requests[-1]
    assert req.stream and req.json["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("stream", [True, False])
def test_usage_estimated_when_server_sends_none(server, client, stream):
    server.enqueue(no_usage("x" * 40))
    result = client.chat([{"role": "user", "content": "y" * 20}], stream=stream)
    assert result.usage_estimated
    assert (result.prompt_tokens, result.completion_tokens) == (5, 10)


def test_finish_reason_length_is_reported(server, client):
    server.enqueue(reply("cut he", finish_reason="length"))
    result = client.chat(HI)
    assert result.truncated and result.text == "cut he"


def test_options_and_per_agent_model(server):
    cfg = server.llm_config(model="gen-model", analysis_model="ana-model", max_tokens=256, temperature=0.2)
    server.enqueue("a", "b")
    with LLMClient(cfg) as c:
        c.chat(HI)
        c.chat(HI, model=cfg.model_for("analysis"), temperature=None)
    gen, ana = server.chat_requests
    assert (gen.model, gen.json["max_tokens"], gen.json["temperature"]) == ("gen-model", 256, 0.2)
    assert ana.model == "ana-model" and "temperature" not in ana.json
    assert cfg.for_role("analysis").model == "ana-model"
    assert server.llm_config(model="only").model_for("analysis") == "only"


def test_dynamic_responder_and_scripted_sequence(server, client):
    server.enqueue("first", lambda req: f"echo: {req['messages'][-1]['content']}")
    server.responder = lambda req: reply("from responder")
    assert client.chat(HI).text == "first"
    assert client.chat([{"role": "user", "content": "ping"}]).text == "echo: ping"
    assert client.chat(HI).text == "from responder"
    assert server.pending == 0


def test_per_model_queues(server, client):
    server.enqueue("gen 1", "gen 2").enqueue_for("analyst", "advice")
    assert client.chat(HI).text == "gen 1"
    assert client.chat(HI, model="analyst").text == "advice"
    assert client.chat(HI).text == "gen 2" and server.pending == 0


def test_unscripted_request_fails_fast(server, client):
    with pytest.raises(LLMRequestError, match="no scripted reply left"):
        client.chat(HI)
    assert len(server.chat_requests) == 1


def test_on_token_exception_propagates_unwrapped(server, client):
    class Cancelled(Exception):
        pass

    def cancel(token: str) -> None:
        raise Cancelled()

    server.enqueue("abcdefgh")
    with pytest.raises(Cancelled):
        client.chat(HI, on_token=cancel)
    assert len(server.chat_requests) == 1


def test_reshapes_request_when_server_refuses_max_tokens(server):
    def strict(req: dict):
        if "max_tokens" in req:
            return error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                              "Use 'max_completion_tokens' instead.")
        return reply(f"ok {req['max_completion_tokens']}")

    server.responder = strict
    with LLMClient(server.llm_config(max_tokens=64)) as c:
        first = c.chat(HI)
        second = c.chat(HI)
    assert first.text == "ok 64" and first.attempts == 2
    assert second.attempts == 1  # learnt once, remembered
    assert [("max_tokens" in r.json) for r in server.chat_requests] == [True, False, False]


def test_reshapes_request_for_servers_without_stream_options(server, client):
    def old_server(req: dict):
        if "stream_options" in req:
            return error(400, "Unrecognized request argument supplied: stream_options")
        return no_usage("fine")

    server.responder = old_server
    result = client.chat(HI)
    assert result.text == "fine" and result.attempts == 2 and result.usage_estimated


def test_server_handles_concurrent_clients(server, client):
    from concurrent.futures import ThreadPoolExecutor

    server.responder = lambda req: reply(req["messages"][0]["content"].upper(), chunk_chars=2)
    words = [f"word{i}" for i in range(12)]
    with ThreadPoolExecutor(6) as pool:
        texts = list(pool.map(lambda w: client.chat([{"role": "user", "content": w}]).text, words))
    assert texts == [w.upper() for w in words] and len(server.chat_requests) == 12


# --------------------------------------------------------------------------------------------------- retries


def test_timeout_retried_then_clear_error(server):
    server.enqueue(slow(3), slow(3))
    t0 = time.monotonic()
    with LLMClient(server.llm_config(timeout_s=0.3, max_retries=1)) as c, pytest.raises(LLMTimeoutError) as info:
        c.chat(HI)
    assert time.monotonic() - t0 < 2.0
    err = info.value
    assert err.attempts == 2 and len(server.chat_requests) == 2
    assert "did not answer within 0.3 s after 2 attempts" in str(err) and "timeout_s" in str(err)
    assert_clean_message(err, endpoint=server.base_url)


def test_timeout_then_success(server):
    server.enqueue(slow(3), "made it")
    with LLMClient(server.llm_config(timeout_s=0.3)) as c:
        result = c.chat(HI, stream=False)
    assert result.text == "made it" and result.attempts == 2


def test_429_then_success_counts_attempts_and_honours_retry_after(server):
    server.enqueue(rate_limited(retry_after=0), rate_limited(retry_after=0.3), "finally")
    events = []
    with LLMClient(server.llm_config(), on_retry=events.append) as c:
        result = c.chat(HI)
    assert result.text == "finally" and result.attempts == 3
    assert [e.attempt for e in events] == [1, 2] and all(isinstance(e.error, LLMRateLimitError) for e in events)
    assert events[1].delay_s == pytest.approx(0.3)
    times = [r.time for r in server.chat_requests]
    assert times[2] - times[1] >= 0.29


def test_retry_after_too_long_fails_at_once(server, client):
    server.enqueue(rate_limited(retry_after=3600))
    with pytest.raises(LLMRateLimitError) as info:
        client.chat(HI)
    assert info.value.retry_after_s == 3600 and info.value.attempts == 1
    assert "wait 3600 s" in str(info.value)


def test_exhausted_quota_is_not_retried(server, client):
    server.enqueue(error(429, "You exceeded your current quota", code="insufficient_quota"))
    with pytest.raises(LLMRateLimitError, match="billing"):
        client.chat(HI)
    assert len(server.chat_requests) == 1


def test_repeated_500_gives_clear_error(server, client):
    server.enqueue(*[server_error(500, "boom\n  at line 3")] * 3)
    with pytest.raises(LLMServerError) as info:
        client.chat(HI)
    err = info.value
    assert err.status == 500 and err.attempts == 3 and len(server.chat_requests) == 3
    assert "HTTP 500: boom at line 3" in str(err) and "after 3 attempts" in str(err)
    assert_clean_message(err, endpoint=server.base_url)


@pytest.mark.parametrize(
    "status, kind", [(401, LLMAuthError), (403, LLMAuthError), (400, LLMRequestError), (404, LLMRequestError)]
)
def test_client_errors_are_not_retried(server, client, status, kind):
    server.enqueue(error(status, "nope"), "never sent")
    with pytest.raises(kind) as info:
        client.chat(HI)
    assert info.value.status == status and info.value.attempts == 1
    assert len(server.chat_requests) == 1
    assert isinstance(info.value, LLMError) and isinstance(info.value, KForgeError)


def test_connection_refused_is_retried_then_reported(server):
    cfg = server.llm_config(max_retries=1)
    server.stop()
    with LLMClient(cfg) as c, pytest.raises(LLMConnectionError) as info:
        c.chat(HI)
    assert "cannot reach" in str(info.value) and info.value.attempts == 2
    assert_clean_message(info.value, endpoint=cfg.base_url)


def test_backoff_policy():
    class NoJitter:
        def uniform(self, a, b):
            return 0.0

    delays = [backoff_delay(n, 0.5, 3.0, NoJitter()) for n in (1, 2, 3, 4, 5)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert 0.375 <= backoff_delay(1, 0.5, 3.0) <= 0.5
    assert parse_retry_after({"Retry-After": "2"}) == 2
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10
    assert parse_retry_after({"Retry-After": "soon"}) is None and parse_retry_after({}) is None


# --------------------------------------------------------------------------------------------------- bad answers


@pytest.mark.parametrize("stream", [True, False])
def test_empty_choices(server, client, stream):
    server.enqueue(empty_choices())
    with pytest.raises(LLMBadResponseError, match="no choices"):
        client.chat(HI, stream=stream)
    assert len(server.chat_requests) == 1


def test_truncated_stream_after_text_is_a_stream_error(server, client):
    server.enqueue(truncated("abcdefghijkl", after_chunks=2), "unused")
    tokens: list[str] = []
    with pytest.raises(LLMStreamError) as info:
        client.chat(HI, on_token=tokens.append)
    err = info.value
    assert err.partial_text == "abcdefgh" == "".join(tokens)
    assert "cut off" in str(err) and "after 8 characters" in str(err)
    assert len(server.chat_requests) == 1  # not retried: the caller already saw those tokens
    assert_clean_message(err, endpoint=server.base_url)


def test_truncated_stream_before_text_is_retried(server, client):
    server.enqueue(truncated("abc", after_chunks=0), "whole answer")
    tokens: list[str] = []
    result = client.chat(HI, on_token=tokens.append)
    assert result.text == "whole answer" == "".join(tokens) and result.attempts == 2


def test_truncated_json_body_is_retried(server, client):
    server.enqueue(truncated("half a body"), "ok")
    assert client.chat(HI, stream=False).attempts == 2


def test_stream_dropped_after_finish_keeps_the_answer(server, client):
    server.enqueue(truncated("complete", after_chunks=99))  # finish sent; usage chunk and [DONE] lost
    result = client.chat(HI)
    assert result.text == "complete" and result.finish_reason == "stop" and result.usage_estimated


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("body", ["<html><body>Sign in to the proxy</body></html>", {"result": "not openai"}])
def test_body_that_is_not_a_completion(server, client, stream, body):
    server.enqueue(garbage(body))
    with pytest.raises(LLMBadResponseError) as info:
        client.chat(HI, stream=stream)
    assert_clean_message(info.value, endpoint=server.base_url)
    assert len(server.chat_requests) == 1


def test_stream_without_finish_reason_is_a_stream_error(server, client):
    server.enqueue(reply("abc", finish_reason=None))
    with pytest.raises(LLMStreamError, match="without a finish_reason") as info:
        client.chat(HI)
    assert info.value.partial_text == "abc"


def test_stalled_stream_is_not_hung_on(server):
    server.enqueue(stall("abcdefgh", after_chunks=1, seconds=5))
    t0 = time.monotonic()
    with LLMClient(server.llm_config(timeout_s=0.3)) as c, pytest.raises(LLMStreamError, match="stalled") as info:
        c.chat(HI)
    assert time.monotonic() - t0 < 2.0 and info.value.partial_text == "abcd"


# --------------------------------------------------------------------------------------------------- images


def test_image_message_building(tmp_path):
    jpeg_path = tmp_path / "shot.jpg"
    jpeg_path.write_bytes(JPEG)
    msg = image_message("see the profile", [PNG, jpeg_path], detail="low")
    text, png_part, jpeg_part = msg["content"]
    assert msg["role"] == "user" and text == {"type": "text", "text": "see the profile"}
    assert png_part["type"] == "image_url" and png_part["image_url"]["detail"] == "low"
    prefix, payload = png_part["image_url"]["url"].split(",", 1)
    assert prefix == "data:image/png;base64" and base64.b64decode(payload) == PNG
    assert jpeg_part["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert image_message("no pictures") == {"role": "user", "content": "no pictures"}
    assert sniff_image_type(PNG) == "image/png" and sniff_image_type(JPEG) == "image/jpeg"
    assert sniff_image_type(GIF) is None


def test_image_message_rejects_other_types(tmp_path):
    with pytest.raises(LLMImageError, match="not a PNG or JPEG"):
        image_message("x", [GIF])
    fake_png = tmp_path / "looks.png"
    fake_png.write_bytes(b"<html>not an image</html>")
    with pytest.raises(LLMImageError, match="looks.png is not a PNG or JPEG"):
        image_message("x", [fake_png])
    with pytest.raises(LLMImageError, match="cannot read image"):
        image_message("x", [tmp_path / "missing.png"])


def test_images_reach_the_server(server, client):
    server.enqueue("I see a roofline")
    client.chat([image_message("what is slow?", [PNG])])
    req = server.chat_requests[-1]
    assert req.prompt == "what is slow?"
    assert req.image_urls == ["data:image/png;base64," + base64.b64encode(PNG).decode()]


def test_model_rejecting_images(server, client):
    server.enqueue(image_rejected(), "unused")
    with pytest.raises(LLMImagesUnsupportedError) as info:
        client.chat([image_message("what is slow?", [PNG])])
    text = str(info.value)
    assert "model 'fake-model'" in text and "does not accept images" in text and "vision model" in text
    assert len(server.chat_requests) == 1
    # The same refusal for a text-only request is an ordinary request error, not an image one.
    server.reset()
    server.enqueue(image_rejected())
    with pytest.raises(LLMRequestError) as info:
        client.chat(HI)
    assert not isinstance(info.value, LLMImagesUnsupportedError)


# --------------------------------------------------------------------------------------------------- config


def test_config_priority_flags_env_settings(clean_env, tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text(
        '[llm]\nbase_url = "http://file:1/v1"\napi_key = "file-key"\nmodel = "file-model"\n'
        'analysis_model = "file-analysis"\ntimeout_s = 12\n'
    )
    clean_env.setenv("KFORGE_SETTINGS", str(settings))
    cfg = resolve_config()
    assert (cfg.base_url, cfg.api_key, cfg.model, cfg.analysis_model, cfg.timeout_s) == (
        "http://file:1/v1", "file-key", "file-model", "file-analysis", 12.0,
    )
    assert cfg.sources["model"] == f"settings:{settings}"

    clean_env.setenv("OPENAI_BASE_URL", "http://env:2/v1")
    clean_env.setenv("KFORGE_MODEL", "env-model")
    clean_env.setenv("KFORGE_ANALYSIS_MODEL", "env-analysis")
    cfg = resolve_config()
    assert (cfg.base_url, cfg.api_key, cfg.model, cfg.analysis_model) == (
        "http://env:2/v1", "file-key", "env-model", "env-analysis",
    )
    assert cfg.sources["base_url"] == "env:OPENAI_BASE_URL" and cfg.sources["api_key"].startswith("settings:")

    clean_env.setenv("OPENAI_API_KEY", "env-key")
    cfg = resolve_config(base_url="http://flag:3/v1", model="flag-model", api_key="")
    assert (cfg.base_url, cfg.api_key, cfg.model, cfg.analysis_model) == (
        "http://flag:3/v1", "env-key", "flag-model", "env-analysis",
    )
    assert cfg.sources["model"] == "flag"

    other = tmp_path / "other.toml"
    other.write_text('[llm]\nmodel = "other-model"\n')
    clean_env.delenv("KFORGE_MODEL")
    assert resolve_config(settings_path=other).model == "other-model"  # explicit path beats $KFORGE_SETTINGS


def test_config_defaults_and_is_configured(clean_env):
    cfg = resolve_config()
    assert cfg.base_url is None and cfg.api_key is None and cfg.model is None
    assert cfg.effective_api_key == PLACEHOLDER_API_KEY
    assert not cfg.is_configured and not is_configured()
    assert LLMConfig(base_url="http://localhost:11434/v1").is_configured
    assert LLMConfig(api_key="sk-abc").is_configured
    clean_env.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")
    assert is_configured()


def test_config_file_errors_are_clear(clean_env, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[llm\nmodel = 1")
    with pytest.raises(LLMConfigError, match="not valid TOML"):
        resolve_config(settings_path=bad)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text("[llm]\ntimeout_s = \"fast\"\n")
    with pytest.raises(LLMConfigError, match="timeout_s must be a number"):
        resolve_config(settings_path=wrong)
    with pytest.raises(LLMConfigError, match="max_retries must be >= 0"):
        LLMConfig(max_retries=-1)
    with pytest.raises(LLMConfigError, match="must start with http"):
        resolve_config(base_url="localhost:8000/v1")


def test_no_model_is_a_config_error(server):
    with LLMClient(server.llm_config(model=None)) as c, pytest.raises(LLMConfigError, match="KFORGE_MODEL"):
        c.chat(HI)
    assert server.chat_requests == []


# --------------------------------------------------------------------------------------------------- secrets


def test_api_key_never_in_errors_or_reprs():
    secret = "sk-test-SECRET-0123456789abcdef"
    with FakeOpenAIServer(api_key="sk-the-right-one-000000") as server:
        cfg = server.llm_config(api_key=secret)
        with LLMClient(cfg) as c:
            with pytest.raises(LLMAuthError) as info:
                c.chat(HI)
            assert server.last_request.bearer == secret  # the key was sent, and the server echoed it back...
            server.api_key = None
            server.enqueue(server_error(500, f"upstream rejected {secret}"), server_error(500, "Bearer " + secret))
            with pytest.raises(LLMServerError) as info5:
                c.chat(HI, max_retries=1)
            check = c.check_endpoint()
            server.api_key = "sk-the-right-one-000000"
            check_auth = c.check_endpoint()
        texts = [str(info.value), repr(info.value), str(info5.value), repr(cfg), str(cfg), repr(c), str(check),
                 str(check_auth)]
        for text in texts:
            assert secret not in text and "SECRET" not in text
        assert "rejected the API key" in str(info.value) and info.value.attempts == 1
        assert check_auth.error_type == "LLMAuthError" and not check_auth.ok


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


# ------------------------------------------------------------------------------------- reasoning, retries, costs


def test_reasoning_content_is_streamed_apart_and_kept(server, client):
    from tests.fakes.openai_server import thinking

    server.enqueue(thinking("Let me think about the tiling.", "The answer."))
    answer, thoughts = [], []
    result = client.chat(HI, on_token=answer.append, on_reasoning=thoughts.append)
    assert "".join(answer) == result.text == "The answer."
    assert "".join(thoughts) == result.reasoning == "Let me think about the tiling."
    assert len(thoughts) > 1  # streamed, not handed over at the end


def test_per_call_retry_callback(server):
    server.enqueue(server_error(), "fine")
    seen = []
    with LLMClient(server.llm_config()) as c:
        assert c.chat(HI, on_retry=seen.append).text == "fine"
    (event,) = seen
    assert event.attempt == 1 and "HTTP 500" in str(event.error) and event.delay_s >= 0


def test_broken_stream_error_carries_what_the_call_cost(server, client):
    server.enqueue(truncated("a" * 400, after_chunks=50))
    with pytest.raises(LLMStreamError) as info:
        client.chat([{"role": "user", "content": "z" * 400}])
    assert info.value.prompt_tokens == 100 and info.value.completion_tokens == 50  # 200 characters arrived


def test_settings_file_context_and_prices(clean_env, tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[llm]\nmodel = "m"\nanalysis_model = "a"\ncontext_tokens = 8192\n'
                    '[pricing]\nprompt_price_per_1m_tokens = 2.5\ncompletion_price_per_1m_tokens = 10\n'
                    'analysis_prompt_price_per_1m_tokens = 0.15\nanalysis_completion_price_per_1m_tokens = 0.6\n')
    cfg = resolve_config(settings_path=path)
    assert cfg.context_tokens == 8192
    assert cfg.price_for("generation") == (2.5, 10.0) and cfg.price_for("analysis") == (0.15, 0.6)
    path.write_text('[pricing]\nprompt_price_per_1m_tokens = 1\ncompletion_price_per_1m_tokens = 2\n')
    assert resolve_config(settings_path=path).price_for("analysis") == (1.0, 2.0)  # one price for every call
    path.write_text('[pricing]\nprompt_price_per_1m_tokens = "cheap"\n')
    with pytest.raises(LLMConfigError, match="must both be numbers"):
        resolve_config(settings_path=path)
    with pytest.raises(LLMConfigError, match="context_tokens must be > 0"):
        LLMConfig(context_tokens=0)
    assert LLMConfig(model="m").price_for("analysis") is None  # unknown is not zero


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
