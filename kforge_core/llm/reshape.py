"""The request's shape, learnt from the server: a server that refuses `max_tokens` (OpenAI reasoning models want
`max_completion_tokens`), a non-default `temperature`, or `stream_options` gets the request reshaped once and sent
again, and the client remembers the reshaping for later calls."""

from __future__ import annotations

import threading
from typing import Any

import openai

from .translate import server_message

# Wording of "this parameter is not accepted" across OpenAI, Azure, vLLM, LM Studio.
_REFUSAL_WORDS = ("unsupported", "not supported", "not support", "only the default", "unrecognized", "unknown")


class RequestShape:
    def __init__(self) -> None:
        self._changes: set[str] = set()
        self._lock = threading.Lock()

    def params(self, model: str, messages: list[dict], max_tokens: int | None, temperature: float | None,
               stream: bool) -> dict[str, Any]:
        params: dict[str, Any] = {"model": model, "messages": messages}
        with self._lock:
            changes = set(self._changes)
        if max_tokens is not None:
            params["max_completion_tokens" if "max_completion_tokens" in changes else "max_tokens"] = max_tokens
        if temperature is not None and "no_temperature" not in changes:
            params["temperature"] = temperature
        if stream:
            params["stream"] = True
            if "no_stream_options" not in changes:
                params["stream_options"] = {"include_usage": True}
        return params

    def learn(self, err: openai.APIStatusError, params: dict) -> bool:
        """True when the refusal names a parameter we can rename or drop (and we had not done so already)."""
        if err.status_code not in (400, 422):
            return False
        msg = server_message(err).lower()
        refused = any(w in msg for w in _REFUSAL_WORDS)
        change = None
        # Only on an explicit refusal: "'max_tokens' or 'max_completion_tokens' is too large" (vLLM) is a real error.
        if "max_tokens" in params and "max_tokens" in msg and refused:
            change = "max_completion_tokens"
        elif "temperature" in params and "temperature" in msg and refused:
            change = "no_temperature"
        elif "stream_options" in params and "stream_options" in msg:
            change = "no_stream_options"
        with self._lock:
            if change is None or change in self._changes:
                return False
            self._changes.add(change)
        return True
