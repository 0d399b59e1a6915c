"""Turn an `openai` package exception into one of our typed errors, with a one-line message and a retry verdict.

This is the only module that knows the SDK's exception classes; everything above sees `LLMError`s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import openai

from .errors import (
    LLMAuthError,
    LLMBadResponseError,
    LLMConnectionError,
    LLMContextError,
    LLMError,
    LLMImagesUnsupportedError,
    LLMRateLimitError,
    LLMRequestError,
    LLMServerError,
    LLMTimeoutError,
    detail,
)
from .context import is_context_refusal, window_from_message
from .retry import is_retryable_status, parse_retry_after

# How servers phrase "this model cannot see images": OpenAI ("image_url is only supported by certain models"),
# vLLM ("... is not a multimodal model"), Ollama/llama.cpp ("image input is not supported", "vision"), LM Studio.
_IMAGE_REFUSAL = re.compile(r"image|vision|multi-?modal", re.IGNORECASE)
# Statuses under which servers report an image refusal (llama.cpp and older Ollama answer 500).
_IMAGE_REFUSAL_STATUS = frozenset({400, 415, 422, 500})


@dataclass(frozen=True)
class CallContext:
    """What an error message needs to name, and the secrets it must not contain."""

    endpoint: str
    model: str | None = None
    had_images: bool = False
    timeout_s: float | None = None
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Failure:
    error: LLMError
    retryable: bool
    retry_after_s: float | None = None


def server_message(err: openai.APIStatusError, secrets: tuple[str, ...] = ()) -> str:
    """The server's own explanation, from the common error-body shapes, made safe to display."""
    body = err.body
    text: object = None
    if isinstance(body, dict):
        for key in ("message", "detail", "error"):
            value = body.get(key)
            if isinstance(value, dict):
                value = value.get("message")
            if isinstance(value, str) and value.strip():
                text = value
                break
        if text is None:
            text = json.dumps(body)[:500]
    elif isinstance(body, str) and body.strip():
        text = body
    else:
        text = re.sub(r"^Error code: \d+ - ", "", err.message or "") or "no details"
    return detail(text, secrets)


def after_attempts(attempts: int) -> str:
    """" after N attempts" for messages, when there was more than one."""
    return f" after {attempts} attempts" if attempts > 1 else ""


def translate(err: openai.OpenAIError, ctx: CallContext, attempts: int) -> Failure:
    ep = ctx.endpoint
    common = dict(endpoint=ep, attempts=attempts)

    if isinstance(err, openai.APITimeoutError):
        within = f" within {ctx.timeout_s:g} s" if ctx.timeout_s else ""
        return Failure(
            LLMTimeoutError(
                f"LLM endpoint {ep} did not answer{within}{after_attempts(attempts)}; "
                "check that the server is up and not overloaded, or raise timeout_s",
                **common,
            ),
            retryable=True,
        )
    if isinstance(err, openai.APIConnectionError):
        # The SDK's own message is a generic "Connection error."; the cause says refused / DNS / TLS.
        cause = detail(err.__cause__ if err.__cause__ is not None else err.message, ctx.secrets) or "no details"
        return Failure(
            LLMConnectionError(
                f"cannot reach LLM endpoint {ep} ({cause}){after_attempts(attempts)}; "
                "check that the server is running and that base_url is right",
                **common,
            ),
            retryable=True,
        )
    if isinstance(err, openai.APIResponseValidationError):
        return Failure(
            LLMBadResponseError(
                f"LLM endpoint {ep} sent a response that is not a chat completion "
                f"({detail(err.message, ctx.secrets)}); check that base_url points at an OpenAI-compatible API",
                status=err.status_code,
                **common,
            ),
            retryable=False,
        )
    if isinstance(err, openai.APIStatusError):
        return _from_status(err, ctx, attempts)
    if isinstance(err, openai.APIError):
        return Failure(
            LLMBadResponseError(
                f"LLM endpoint {ep} reported an error: {detail(err.message, ctx.secrets)}", **common
            ),
            retryable=False,
        )
    return Failure(
        LLMError(f"LLM client error with endpoint {ep}: {detail(err, ctx.secrets)}", **common), retryable=False
    )


def _from_status(err: openai.APIStatusError, ctx: CallContext, attempts: int) -> Failure:
    ep, model, status = ctx.endpoint, ctx.model, err.status_code
    msg = server_message(err, ctx.secrets)
    common = dict(endpoint=ep, attempts=attempts, status=status)
    code = err.code if isinstance(err.code, str) else ""

    if ctx.had_images and status in _IMAGE_REFUSAL_STATUS and _IMAGE_REFUSAL.search(msg):
        return Failure(
            LLMImagesUnsupportedError(
                f"model {model!r} at {ep} does not accept images (HTTP {status}: {msg}); "
                "remove the screenshots or choose a vision model",
                **common,
            ),
            retryable=False,
        )
    # 413: a proxy's body-size limit, which a shorter prompt fixes as well
    if status == 413 or (status in (400, 422) and is_context_refusal(msg)):
        window = window_from_message(msg)
        named = f" of {window} tokens" if window else ""
        return Failure(
            LLMContextError(
                f"the prompt does not fit the context window{named} of model {model!r} at {ep} (HTTP {status}: "
                f"{msg}); shorten the prompt, or load the model with a longer context",
                context_tokens=window,
                **common,
            ),
            False,
        )
    if status in (401, 403):
        hint = (
            "set a valid key with --api-key, OPENAI_API_KEY or [llm] api_key in the settings file"
            if status == 401
            else f"check that this key may use model {model!r}"
        )
        what = "rejected the API key" if status == 401 else "refused access"
        return Failure(LLMAuthError(f"LLM endpoint {ep} {what} (HTTP {status}: {msg}); {hint}", **common), False)
    if status == 429:
        retry_after = parse_retry_after(dict(err.response.headers))
        # OpenAI answers 429 for an exhausted quota too; waiting does not fix that.
        quota = code == "insufficient_quota" or "quota" in msg.lower()
        wait = f"; the server asks to wait {retry_after:g} s" if retry_after is not None else ""
        hint = "check the account's billing/quota" if quota else "wait a moment or lower the request rate"
        return Failure(
            LLMRateLimitError(
                f"LLM endpoint {ep} is rate limiting (HTTP 429: {msg}){after_attempts(attempts)}{wait}; {hint}",
                retry_after_s=retry_after,
                **common,
            ),
            retryable=not quota,
            retry_after_s=retry_after,
        )
    if is_retryable_status(status):
        return Failure(
            LLMServerError(
                f"LLM endpoint {ep} failed (HTTP {status}: {msg}){after_attempts(attempts)}; "
                "the server may be overloaded or restarting, try again later",
                **common,
            ),
            retryable=True,
            retry_after_s=parse_retry_after(dict(err.response.headers)),
        )
    if status == 404:
        return Failure(
            LLMRequestError(
                f"LLM endpoint {ep} answered HTTP 404 ({msg}); check the model name {model!r} "
                "(the Settings page lists the served models) and that base_url ends with the API path, e.g. /v1",
                **common,
            ),
            False,
        )
    return Failure(
        LLMRequestError(
            f"LLM endpoint {ep} refused the request (HTTP {status}: {msg}); "
            f"check model {model!r} and the request settings (max_tokens, temperature)",
            **common,
        ),
        False,
    )
