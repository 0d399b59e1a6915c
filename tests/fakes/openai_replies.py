"""Scripted answers for the fake OpenAI server (`tests/fakes/openai_server.py`): `Reply`, one answer to a chat
request (a normal reply or a fault), and the factories that build each kind (see the server's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Union


@dataclass
class Reply:
    """One scripted answer to a chat request (a normal reply or a fault). Build it with the factories below."""

    text: str = ""
    finish_reason: str | None = "stop"
    model: str | None = None
    usage: bool = True
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    chunk_chars: int = 4
    delay_s: float = 0.0
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    empty_choices: bool = False
    truncate_after: int | None = None
    stall_after: int | None = None
    stall_s: float = 0.0
    reasoning: str = ""


Responder = Callable[[dict], Union[Reply, str]]
Scripted = Union[Reply, str, Responder]


def reply(text: str, *, finish_reason: str | None = "stop", **kw: Any) -> Reply:
    return Reply(text=text, finish_reason=finish_reason, **kw)


def no_usage(text: str, **kw: Any) -> Reply:
    return Reply(text=text, usage=False, **kw)


def slow(seconds: float, text: str = "late", **kw: Any) -> Reply:
    return Reply(text=text, delay_s=seconds, **kw)


def stall(text: str, after_chunks: int, seconds: float, **kw: Any) -> Reply:
    return Reply(text=text, stall_after=after_chunks, stall_s=seconds, **kw)


def truncated(text: str, after_chunks: int = 2, **kw: Any) -> Reply:
    return Reply(text=text, truncate_after=after_chunks, **kw)


def thinking(reasoning: str, text: str, **kw: Any) -> Reply:
    return Reply(text=text, reasoning=reasoning, **kw)


def empty_choices(**kw: Any) -> Reply:
    return Reply(empty_choices=True, **kw)


def error(
    status: int,
    message: str = "error",
    *,
    type: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> Reply:
    if body is None:
        body = {"error": {"message": message, "type": type or "invalid_request_error", "param": None, "code": code}}
    return Reply(status=status, body=body, headers=dict(headers or {}))


def rate_limited(retry_after: float | None = 0, message: str = "Rate limit reached, slow down", **kw: Any) -> Reply:
    headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
    return error(429, message, type="rate_limit_error", code="rate_limit_exceeded", headers=headers, **kw)


def garbage(body: Any = "<html><body>502 Bad Gateway</body></html>", status: int = 200, **kw: Any) -> Reply:
    """A body that is not a chat completion (a proxy's HTML page, a different API's JSON), sent as-is."""
    return Reply(status=status, body=body, **kw)


def server_error(status: int = 500, message: str = "The server had an error while processing your request") -> Reply:
    return error(status, message, type="server_error")


def image_rejected(message: str = "Invalid content type. image_url is only supported by certain models.") -> Reply:
    return error(400, message, code="invalid_value")
