"""Typed errors of the LLM client, and the redaction every message goes through.

Each error's `str()` is one line a user can act on: what failed, at which endpoint, and what to do. They never carry
the API key (messages are scrubbed, and the original SDK exception is not chained, because its text and request
object can hold headers) and never a raw traceback.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from ..errors import KForgeError

_MAX_DETAIL = 240

# Key-shaped tokens are scrubbed even when we do not know the key (a server may echo another key, a proxy may
# echo a header).
_KEY_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-*]{6,}"),
    re.compile(r"(?i)\bbearer\s+\S+"),
)


class LLMError(KForgeError):
    """Base class. `endpoint` is the redacted base URL, `status` the HTTP status when there was one,
    `attempts` how many HTTP requests were made before giving up."""

    def __init__(self, message: str, *, endpoint: str | None = None, status: int | None = None, attempts: int = 1):
        self.endpoint = endpoint
        self.status = status
        self.attempts = attempts
        # What the failed call cost, as far as we can tell (set by the client: estimates, since a failed call
        # reports no usage): prompt tokens when the server began answering, and the partial answer's tokens.
        self.prompt_tokens = 0
        self.completion_tokens = 0
        super().__init__(one_line(message))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class LLMConfigError(LLMError):
    """The client is not usable as configured (no model, unreadable settings file, bad value)."""


class LLMConnectionError(LLMError):
    """The endpoint could not be reached (refused, DNS, TLS) or did not answer in time, after all retries."""


class LLMTimeoutError(LLMConnectionError):
    """No data for `timeout_s` seconds (connect or read), after all retries."""


class LLMAuthError(LLMError):
    """HTTP 401/403: the key is missing, wrong, or not allowed to use this model. Never retried."""


class LLMRateLimitError(LLMError):
    """HTTP 429 after all retries (or a Retry-After too long to wait). `retry_after_s` is the server's hint."""

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kw):
        self.retry_after_s = retry_after_s
        super().__init__(message, **kw)


class LLMServerError(LLMError):
    """HTTP 5xx (or 408/409) after all retries."""


class LLMRequestError(LLMError):
    """HTTP 400/404/422 and other non-retryable refusals of the request itself (unknown model, bad parameter)."""


class LLMContextError(LLMRequestError):
    """The prompt (plus the room asked for the answer) does not fit the model's context window (HTTP 400).
    `context_tokens` is the window the server named, when it named one. Not a reason to stop a run: the caller
    clips the prompt and asks again, or treats it as a failed call of the model."""

    def __init__(self, message: str, *, context_tokens: int | None = None, **kw):
        self.context_tokens = context_tokens
        super().__init__(message, **kw)


class LLMImagesUnsupportedError(LLMRequestError):
    """The model refused a message with images (a text-only model)."""


class LLMBadResponseError(LLMError):
    """The server answered 200 but with something unusable (no choices, not JSON, wrong shape)."""


class LLMStreamError(LLMError):
    """A streamed answer broke: the connection dropped or stalled, or the stream ended without a finish_reason.
    `partial_text` holds what had arrived (and had already been passed to `on_token`)."""

    def __init__(self, message: str, *, partial_text: str = "", **kw):
        self.partial_text = partial_text
        super().__init__(message, **kw)


class LLMImageError(LLMError, ValueError):
    """An image given to `image_message` is unreadable or not PNG/JPEG (a caller mistake, raised before sending)."""


# --------------------------------------------------------------------------------------------------- redaction


def one_line(text: str, limit: int | None = None) -> str:
    """Collapse whitespace (server bodies may be multi-line HTML or JSON) and bound the length."""
    flat = " ".join(str(text).split())
    if limit is not None and len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return flat


def scrub(text: str, secrets: tuple[str, ...] | list[str] = ()) -> str:
    """Remove known secrets and key-shaped tokens from `text`."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    for pattern in _KEY_PATTERNS:
        text = pattern.sub("***", text)
    return text


def detail(text: object, secrets: tuple[str, ...] | list[str] = ()) -> str:
    """A server-provided message made safe to show: scrubbed, one line, bounded."""
    return one_line(scrub(str(text), secrets), _MAX_DETAIL)


def redact_url(url: str | None) -> str:
    """scheme://host[:port]/path only: user:password@ and query strings may hold credentials."""
    if not url:
        return "(no endpoint)"
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return "(unparsable endpoint)"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", "")) or "(unparsable endpoint)"
