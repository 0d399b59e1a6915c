"""`LLMClient`: chat completions against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LM Studio,
OpenRouter), through the `openai` package, with streaming, retries, usage accounting and typed errors.

Behaviour worth knowing:
  * Retries are ours (the SDK's are off) so that attempts are counted, backoff is configurable and every final
    failure is one typed `LLMError`. Transient failures (connection, timeout, 408/409/429/5xx) are retried with
    exponential backoff, honouring Retry-After up to `max_retry_after_s`; 400/401/403/404 fail at once.
  * Streaming: each content delta goes to `on_token` as it arrives. A stream that drops, stalls for `timeout_s`,
    or ends without a `finish_reason` raises `LLMStreamError` (with `partial_text`); it is retried only when no
    text had been passed to `on_token` yet, so a caller never sees tokens twice. A stream (or JSON reply) with no
    choices at all raises `LLMBadResponseError`.
  * Portability: if a server refuses `max_tokens` (OpenAI reasoning models want `max_completion_tokens`), a
    non-default `temperature`, or `stream_options`, the request is reshaped once and sent again; the client
    remembers the reshaping for later calls.
  * Reasoning models: `reasoning_content` (vLLM with a reasoning parser, DeepSeek) or `reasoning` deltas go to
    `on_reasoning`, never into the answer; `ChatResult.reasoning` keeps them. Thinking written into the content
    (`<think>...</think>`) is the caller's to split (`kforge_core.agents.thinking`).
  * Context: `context_window(model)` says how many tokens the model holds (setting, what the server revealed,
    GET /models, default: see `context`); a context-length refusal raises `LLMContextError` and teaches the
    client the window it named; a reply whose `prompt_tokens` is far below the estimate carries a warning.
  * A failed call's error carries estimated `prompt_tokens` / `completion_tokens` when the server had begun
    answering (a broken stream), so that the caller can account what it cost.
  * Exceptions raised by `on_token` propagate unchanged (that is how a caller cancels a stream).
"""

from __future__ import annotations

import threading
import time
from functools import partial
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

import openai

from .config import LLMConfig
from .context import DEFAULT_CONTEXT_TOKENS, MIN_CONTEXT_TOKENS, truncation_warning, window_from_model_entry
from .answer import SHAPE_ERRORS, AttemptFailed, Outcome, TokenCallback, read_json, read_stream
from .errors import LLMBadResponseError, LLMConfigError, LLMContextError, LLMError, LLMStreamError
from .images import has_images
from .retry import backoff_delay
from .tokens import estimate_prompt_tokens, estimate_tokens
from .reshape import RequestShape
from .translate import CallContext, Failure, translate

if TYPE_CHECKING:
    from .endpoint import EndpointCheck

T = TypeVar("T")

# A slow or unroutable host should not hold an attempt for the whole (long) read timeout.
_MAX_CONNECT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ChatResult:
    text: str
    """The assistant's answer (all content deltas joined when streaming)."""
    finish_reason: str | None
    """"stop", "length" (hit max_tokens: the answer is cut), "content_filter", ... as the server said."""
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    """Seconds of the successful attempt, from sending the request to the last byte."""
    model: str
    """The model that answered (as the server reports it; else the one requested)."""
    attempts: int
    """HTTP requests made for this answer (1 = first try worked)."""
    usage_estimated: bool = False
    """True when the server reported no usage and the token counts are ~len/4 estimates."""
    first_token_s: float | None = None
    """Seconds from sending the request to the first content delta (streaming only)."""
    elapsed_s: float = 0.0
    """Seconds for the whole call, failed attempts and backoff included."""
    reasoning: str = ""
    """The model's separate reasoning (`reasoning_content` deltas), when the server sends it apart."""
    warnings: tuple[str, ...] = ()
    """Things the caller should show (e.g. the server cut the prompt to its context window)."""

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass(frozen=True)
class RetryEvent:
    """Passed to `on_retry` before each backoff sleep (e.g. for a "retrying in 2 s" status line)."""

    attempt: int
    error: LLMError
    delay_s: float


class _Reshaped(Exception):
    """The server refused a parameter we can drop or rename; send again (does not use up a retry)."""


_UNSET: Any = object()


class LLMClient:
    def __init__(
        self,
        config: LLMConfig,
        *,
        on_retry: Callable[[RetryEvent], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        http_client: Any = None,
    ) -> None:
        self.config = config
        self._on_retry = on_retry
        self._sleep = sleep
        kwargs: dict[str, Any] = dict(
            base_url=config.effective_base_url,
            api_key=config.effective_api_key,
            max_retries=0,  # ours, see the module docstring
            timeout=_timeout(config.timeout_s),
        )
        if http_client is not None:
            kwargs["http_client"] = http_client
        self._sdk = openai.OpenAI(**kwargs)
        self._shape = RequestShape()
        self._windows_lock = threading.Lock()
        self._windows: dict[str, int] = {}  # model -> context window the server revealed or published
        self._listed_windows: dict[str, int | None] | None = None  # GET /models, asked once

    # ---- lifecycle
    def close(self) -> None:
        self._sdk.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LLMClient(endpoint={self.config.endpoint!r}, model={self.config.model!r})"

    # ---- public API
    def chat(
        self,
        messages: Iterable[dict],
        *,
        stream: bool = True,
        on_token: TokenCallback | None = None,
        model: str | None = None,
        max_tokens: int | None = _UNSET,
        temperature: float | None = _UNSET,
        max_retries: int | None = None,
        timeout_s: float | None = None,
        on_reasoning: TokenCallback | None = None,
        on_retry: Callable[[RetryEvent], None] | None = None,
    ) -> ChatResult:
        """One chat completion. `model`, `max_tokens`, `temperature`, `max_retries`, `timeout_s` override the
        config for this call (None for max_tokens/temperature means "server default"). Without streaming,
        `on_token` receives the whole text once. `on_reasoning` gets separate reasoning deltas, `on_retry` each
        backoff of this call (besides the client's own `on_retry`). Raises an `LLMError` subclass on failure."""
        messages = list(messages)
        if not messages:
            raise ValueError("chat() needs at least one message")
        model = model or self.config.model
        if not model:
            raise LLMConfigError(
                f"no model set for LLM endpoint {self.config.endpoint}; "
                "set --model, KFORGE_MODEL or [llm] model in the settings file",
                endpoint=self.config.endpoint,
            )
        max_tokens = self.config.max_tokens if max_tokens is _UNSET else max_tokens
        temperature = self.config.temperature if temperature is _UNSET else temperature
        timeout = timeout_s or self.config.timeout_s
        ctx = self._context(model=model, had_images=has_images(messages), timeout_s=timeout)

        def attempt(n: int) -> tuple[Outcome, float]:
            params = self._shape.params(model, messages, max_tokens, temperature, stream)
            t0 = time.monotonic()
            try:
                call = partial(self._sdk.chat.completions.create, **params, timeout=_timeout(timeout))
                out = (read_stream(call(), t0, on_token, on_reasoning, ctx, n) if stream
                       else read_json(call, on_token, ctx, n))
            except openai.APIStatusError as err:
                if self._shape.learn(err, params):
                    raise _Reshaped() from None
                raise
            return out, time.monotonic() - t0

        start = time.monotonic()
        estimate = estimate_prompt_tokens(messages)
        try:
            (out, latency), attempts = self._with_retries(attempt, ctx, max_retries, on_retry)
        except LLMContextError as err:
            if err.context_tokens:
                self.learn_context_window(model, err.context_tokens)
            raise
        except LLMStreamError as err:
            # The server read the prompt and began answering: that much was spent (no usage comes with a break).
            err.prompt_tokens, err.completion_tokens = estimate, estimate_tokens(err.partial_text)
            raise
        usage = out.usage
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        completion_tokens = getattr(usage, "completion_tokens", None)
        estimated = not isinstance(prompt_tokens, int) or not isinstance(completion_tokens, int)
        warnings: list[str] = []
        if isinstance(prompt_tokens, int):
            warning = truncation_warning(estimate, prompt_tokens, model)
            if warning:
                warnings.append(warning)
                self.learn_context_window(model, prompt_tokens)  # about what the server kept: its window
        return ChatResult(
            text=out.text,
            finish_reason=out.finish_reason,
            prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else estimate,
            completion_tokens=(
                completion_tokens if isinstance(completion_tokens, int)
                else estimate_tokens(out.text) + estimate_tokens(out.reasoning)
            ),
            latency_s=latency,
            model=out.model or model,
            attempts=attempts,
            usage_estimated=estimated,
            first_token_s=out.first_token_s,
            elapsed_s=time.monotonic() - start,
            reasoning=out.reasoning,
            warnings=tuple(warnings),
        )

    # ---- context window
    def context_window(self, model: str | None = None) -> int:
        """Tokens the model's context holds: the setting, else what the server revealed, else GET /models (asked
        once per client, failures ignored), else `DEFAULT_CONTEXT_TOKENS`."""
        model = model or self.config.model or ""
        if self.config.context_tokens:
            return self.config.context_tokens
        with self._windows_lock:
            learned = self._windows.get(model)
        if learned:
            return learned
        listed = self.published_context_window(model)
        return listed or DEFAULT_CONTEXT_TOKENS

    def learn_context_window(self, model: str, tokens: int) -> None:
        """Remember a window the server revealed (a refusal naming it, a prompt it cut); only ever smaller."""
        tokens = max(int(tokens), MIN_CONTEXT_TOKENS)
        with self._windows_lock:
            known = self._windows.get(model)
            if known is None or tokens < known:
                self._windows[model] = tokens

    def published_context_window(self, model: str) -> int | None:
        """The window GET /models publishes for `model` (asked once per client); None when it publishes none."""
        if self._listed_windows is None:
            windows: dict[str, int | None] = {}
            try:
                page = self._sdk.models.list(timeout=_timeout(min(self.config.timeout_s, 20.0)))
                for entry in getattr(page, "data", None) or []:
                    raw = entry.model_dump() if hasattr(entry, "model_dump") else dict(entry)
                    if isinstance(raw.get("id"), str):
                        windows[raw["id"]] = window_from_model_entry(raw)
            except (openai.OpenAIError, *SHAPE_ERRORS):
                pass  # a server without /models: the setting or the default decides
            self._listed_windows = windows
        return self._listed_windows.get(model)

    def list_models(self, *, timeout_s: float | None = None, max_retries: int | None = None) -> list[str]:
        """Model ids the endpoint serves (GET /models), in the server's order."""
        timeout = timeout_s or self.config.timeout_s
        ctx = self._context(model=None, timeout_s=timeout)

        def attempt(n: int) -> list[str]:
            try:
                page = self._sdk.models.list(timeout=_timeout(timeout))
                if getattr(page, "data", None) is None:
                    raise TypeError("no data list")
                ids = [m.id for m in page]
            except SHAPE_ERRORS:
                raise AttemptFailed(
                    Failure(
                        LLMBadResponseError(
                            f"LLM endpoint {ctx.endpoint} answered GET /models with an unexpected shape; "
                            "check that base_url points at an OpenAI-compatible API",
                            endpoint=ctx.endpoint,
                            attempts=n,
                        ),
                        retryable=False,
                    )
                ) from None
            return list(dict.fromkeys(i for i in ids if isinstance(i, str)))

        ids, _ = self._with_retries(attempt, ctx, max_retries)
        return ids

    def check_endpoint(self, *, timeout_s: float = 20.0, test_call: bool = True) -> EndpointCheck:
        """See `kforge_core.llm.endpoint.check_endpoint`."""
        # import circle (justified): the endpoint check makes its test call through a client; this method is the
        # client's convenience way in to it
        from .endpoint import check_endpoint

        return check_endpoint(self, timeout_s=timeout_s, test_call=test_call)

    # ---- one attempt
    # ---- retry loop
    def _context(self, *, model: str | None, had_images: bool = False, timeout_s: float | None = None) -> CallContext:
        secrets = (self.config.api_key,) if self.config.api_key else ()
        return CallContext(self.config.endpoint, model, had_images, timeout_s, secrets)

    def _with_retries(self, attempt_fn: Callable[[int], T], ctx: CallContext, max_retries: int | None,
                      on_retry: Callable[[RetryEvent], None] | None = None) -> tuple[T, int]:
        cfg = self.config
        budget = cfg.max_retries if max_retries is None else max_retries
        attempts = retries = 0
        while True:
            attempts += 1
            try:
                return attempt_fn(attempts), attempts
            except _Reshaped:
                continue  # bounded: each reshaping is learnt at most once
            except AttemptFailed as failed:
                failure = failed.failure
            except openai.OpenAIError as err:
                failure = translate(err, ctx, attempts)
            if not failure.retryable or retries >= budget:
                raise failure.error from None
            delay = backoff_delay(retries + 1, cfg.retry_base_delay_s, cfg.retry_max_delay_s)
            if failure.retry_after_s is not None:
                if failure.retry_after_s > cfg.max_retry_after_s:
                    raise failure.error from None  # its message carries the server's hint
                delay = failure.retry_after_s
            retries += 1
            for callback in (self._on_retry, on_retry):
                if callback is not None:
                    callback(RetryEvent(attempts, failure.error, delay))
            self._sleep(delay)


def _timeout(seconds: float) -> openai.Timeout:
    return openai.Timeout(seconds, connect=min(seconds, _MAX_CONNECT_TIMEOUT_S))
