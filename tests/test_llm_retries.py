"""kforge_core.llm's retries against the fake OpenAI server (tests/fakes/openai_server.py): timeouts,
429 with Retry-After, 5xx, refused connections, what is not retried, the backoff policy, a call's retry callback.

Timeouts and retry delays are tiny so that the file runs in a few seconds; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import time

import pytest

from kforge_core.errors import KForgeError
from kforge_core.llm import (
    LLMAuthError, LLMClient, LLMConnectionError, LLMError, LLMRateLimitError, LLMRequestError, LLMServerError,
    LLMStreamError, LLMTimeoutError)
from kforge_core.llm.retry import backoff_delay, parse_retry_after
from tests.fakes.openai_replies import error, rate_limited, server_error, slow, truncated
from tests.fakes.openai_server import fake_openai_server  # noqa: F401 - pytest fixture
from tests.llm_fixtures import HI, assert_clean_message, client, server  # noqa: F401 - pytest fixtures


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
