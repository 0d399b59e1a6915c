"""Reading one attempt's answer: a JSON chat completion or a server-sent event stream, into an `Outcome`, or an
`AttemptFailed` already classified (a stream that drops, stalls or ends without a finish_reason; a body that is not
a chat completion). The retry loop in `client` decides what to do with a failure."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import openai

from .errors import LLMBadResponseError, LLMStreamError, detail
from .translate import CallContext, Failure, after_attempts

TokenCallback = Callable[[str], None]

NOT_A_COMPLETION = "answered with something that is not a chat completion"
NO_CHOICES = "retry, or check the server logs and that the model is loaded"
NOT_OPENAI = "check that base_url points at an OpenAI-compatible API (a proxy or login page may be answering)"
# What the SDK raises when a 200 body has an unexpected shape (it validates lazily, or not at all).
SHAPE_ERRORS = (TypeError, AttributeError, ValueError, KeyError)


@dataclass
class Outcome:
    text: str
    finish_reason: str | None
    usage: Any
    model: str | None
    first_token_s: float | None = None
    reasoning: str = ""


class AttemptFailed(Exception):
    """One attempt failed in a way already classified (stream faults, bad shapes)."""

    def __init__(self, failure: Failure):
        self.failure = failure


def bad_response(ctx: CallContext, attempt: int, hint: str, what: str) -> Failure:
    return Failure(
        LLMBadResponseError(
            f"LLM endpoint {ctx.endpoint} {what} for model {ctx.model!r}; {hint}",
            endpoint=ctx.endpoint,
            attempts=attempt,
        ),
        retryable=False,
    )


def read_json(make_response: Callable[[], Any], on_token: TokenCallback | None, ctx: CallContext,
              attempt: int) -> Outcome:
    try:
        response = make_response()
    except SHAPE_ERRORS:  # the SDK choking on a body that is not a completion
        raise AttemptFailed(bad_response(ctx, attempt, NOT_OPENAI, NOT_A_COMPLETION)) from None
    choices = getattr(response, "choices", None)
    if choices is None or not isinstance(choices, list):
        raise AttemptFailed(bad_response(ctx, attempt, NOT_OPENAI, NOT_A_COMPLETION))
    if not choices:
        raise AttemptFailed(bad_response(ctx, attempt, NO_CHOICES, "returned no choices"))
    choice = choices[0]
    message = getattr(choice, "message", None)
    content = getattr(message, "content", None)
    text = content if isinstance(content, str) else ""
    thought = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
    if on_token is not None and text:
        on_token(text)
    return Outcome(text, getattr(choice, "finish_reason", None), getattr(response, "usage", None),
                   getattr(response, "model", None), reasoning=thought if isinstance(thought, str) else "")


def read_stream(stream: Any, t0: float, on_token: TokenCallback | None, on_reasoning: TokenCallback | None,
                ctx: CallContext, attempt: int) -> Outcome:
    """`stream`: the SDK's stream, opened at `t0` (monotonic); closed here whatever happens."""
    parts: list[str] = []
    thinking: list[str] = []
    finish: str | None = None
    usage: Any = None
    model: str | None = None
    first: float | None = None
    saw_choice = False
    try:
        chunks = iter(stream)
        while True:
            # Only the SDK's read is guarded: exceptions from on_token must reach the caller untouched.
            try:
                chunk = next(chunks)
            except StopIteration:
                break
            except openai.APIError as err:
                if finish is not None:
                    break  # the answer was complete; only the usage chunk / [DONE] got lost
                raise AttemptFailed(stream_failure(err, ctx, attempt, "".join(parts),
                                                   seen=bool(parts or thinking))) from None
            except ValueError:  # an SSE data line that is not JSON
                failure = bad_response(ctx, attempt, NOT_OPENAI, "sent a malformed stream event")
                raise AttemptFailed(failure) from None
            model = getattr(chunk, "model", None) or model
            usage = getattr(chunk, "usage", None) or usage
            for choice in getattr(chunk, "choices", None) or []:
                if getattr(choice, "index", 0) != 0:
                    continue
                saw_choice = True
                delta = getattr(choice, "delta", None)
                # vLLM's reasoning parsers and DeepSeek say reasoning_content; newer vLLM and OpenRouter reasoning
                thought = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
                if isinstance(thought, str) and thought:
                    thinking.append(thought)
                    if on_reasoning is not None:
                        on_reasoning(thought)
                content = getattr(delta, "content", None)
                if isinstance(content, str) and content:
                    if first is None:
                        first = time.monotonic() - t0
                    parts.append(content)
                    if on_token is not None:
                        on_token(content)
                finish = getattr(choice, "finish_reason", None) or finish
    finally:
        stream.close()
    text = "".join(parts)
    if not saw_choice:
        raise AttemptFailed(bad_response(ctx, attempt, NO_CHOICES, "streamed no choices"))
    if finish is None:
        got = f"after {len(text)} characters" if text else "before any text"
        raise AttemptFailed(
            Failure(
                LLMStreamError(
                    f"the answer stream from {ctx.endpoint} ended without a finish_reason {got}"
                    f"{after_attempts(attempt)}; the server or a proxy cut it short, retry the request",
                    partial_text=text,
                    endpoint=ctx.endpoint,
                    attempts=attempt,
                ),
                retryable=not (text or thinking),
            )
        )
    return Outcome(text, finish, usage, model, first, "".join(thinking))


def stream_failure(err: openai.APIError, ctx: CallContext, attempt: int, partial: str, seen: bool) -> Failure:
    if isinstance(err, openai.APITimeoutError):
        what = f"stalled (no data for {ctx.timeout_s:g} s)"
    elif isinstance(err, openai.APIConnectionError):
        cause = err.__cause__ if err.__cause__ is not None else err.message
        what = f"was cut off ({detail(cause, ctx.secrets)})"
    else:  # an error event inside the stream (vLLM, OpenRouter send those)
        what = f"reported an error ({detail(err.message, ctx.secrets)})"
    got = f"after {len(partial)} characters" if partial else "before any text"
    return Failure(
        LLMStreamError(
            f"the answer stream from {ctx.endpoint} {what} {got}{after_attempts(attempt)}; "
            "check the server (logs, load) and retry the request",
            partial_text=partial,
            endpoint=ctx.endpoint,
            attempts=attempt,
        ),
        # Once text reached on_token, a silent retry would show the caller the same tokens twice.
        retryable=not seen,
    )
