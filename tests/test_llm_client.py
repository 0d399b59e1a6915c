"""kforge_core.llm against a real local HTTP server speaking the OpenAI protocol (tests/fakes/openai_server.py).

Timeouts and retry delays are tiny so that the file runs in a few seconds; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import time

import pytest

from kforge_core.llm import PLACEHOLDER_API_KEY, LLMBadResponseError, LLMClient, LLMRequestError, LLMStreamError
from tests.fakes.openai_replies import empty_choices, error, garbage, no_usage, reply, stall, truncated
from tests.fakes.openai_server import fake_openai_server  # noqa: F401 - pytest fixture
from tests.llm_fixtures import HI, assert_clean_message, client, server  # noqa: F401 - pytest fixtures


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


# --------------------------------------------------------------------------------------------------- reasoning


def test_reasoning_content_is_streamed_apart_and_kept(server, client):
    from tests.fakes.openai_replies import thinking

    server.enqueue(thinking("Let me think about the tiling.", "The answer."))
    answer, thoughts = [], []
    result = client.chat(HI, on_token=answer.append, on_reasoning=thoughts.append)
    assert "".join(answer) == result.text == "The answer."
    assert "".join(thoughts) == result.reasoning == "Let me think about the tiling."
    assert len(thoughts) > 1  # streamed, not handed over at the end
