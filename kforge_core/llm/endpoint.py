"""`check_endpoint`: the Settings page's "Test connection" — list the models and make one tiny call.

It never raises for endpoint problems: the result carries a one-line `error` to show instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .config import LLMConfig
from .errors import LLMAuthError, LLMConnectionError, LLMError

_PROBE = [{"role": "user", "content": "Reply with the single word: ok"}]
# Enough for a one-word answer; reasoning models may spend it all thinking and return "", which still proves the
# endpoint, the key and the model work.
_PROBE_MAX_TOKENS = 16


@dataclass(frozen=True)
class EndpointCheck:
    ok: bool
    endpoint: str
    """The base URL, redacted."""
    models: list[str] | None = None
    """Ids from GET /models; None when the server does not list models (or could not be asked)."""
    model: str | None = None
    """The model the test call used (the configured generation model)."""
    model_listed: bool | None = None
    """Whether `model` is among `models` (None when unknown)."""
    latency_s: float | None = None
    """Seconds the test call took."""
    reply: str | None = None
    error: str | None = None
    """One line saying what is wrong and what to do, when not ok."""
    error_type: str | None = None
    """The `LLMError` subclass name, for the UI to pick an icon or a hint."""
    notes: list[str] = field(default_factory=list)
    context_tokens: int | None = None
    """The context window KForge plans prompts for (setting, else GET /models, else the default)."""


def is_served(model: str, models: list[str]) -> bool:
    """Whether a GET /models list serves `model`: listed as is, or (Ollama) with the ":latest" tag it implies."""
    return model in models or (":" not in model and f"{model}:latest" in models)


def with_served_models(client, err: LLMError, model: str | None) -> LLMError:
    """A 404 for a model the endpoint does not serve, re-worded to name the models it does serve (when it lists
    them); any other error unchanged."""
    from .errors import LLMRequestError

    if not isinstance(err, LLMRequestError) or err.status != 404 or not model:
        return err
    try:
        models = client.list_models(timeout_s=min(client.config.timeout_s, 10.0), max_retries=0)
    except LLMError:
        return err
    if not models or is_served(model, models):
        return err
    served = ", ".join(models[:20]) + (" ..." if len(models) > 20 else "")
    return LLMRequestError(f"{err}; model {model!r} is not among the models it serves: {served}",
                           endpoint=err.endpoint, status=err.status, attempts=err.attempts)


def check_endpoint(client_or_config, *, timeout_s: float = 20.0, test_call: bool = True) -> EndpointCheck:
    """Check an `LLMClient` or `LLMConfig`: models list, then (when `test_call`) a tiny non-streamed chat.
    `timeout_s` bounds each request; no retries, so the page answers promptly."""
    from .client import LLMClient

    if isinstance(client_or_config, LLMConfig):
        with LLMClient(client_or_config) as client:
            return _check(client, timeout_s, test_call)
    return _check(client_or_config, timeout_s, test_call)


def _failed(endpoint: str, err: LLMError, **kw) -> EndpointCheck:
    return EndpointCheck(ok=False, endpoint=endpoint, error=str(err), error_type=type(err).__name__, **kw)


def _check(client, timeout_s: float, test_call: bool) -> EndpointCheck:
    config: LLMConfig = client.config
    endpoint = config.endpoint
    model = config.model
    notes: list[str] = []
    models: list[str] | None
    try:
        models = client.list_models(timeout_s=timeout_s, max_retries=0)
    except (LLMAuthError, LLMConnectionError) as err:
        return _failed(endpoint, err, model=model)  # the test call would fail the same way
    except LLMError as err:
        # Some servers do not implement /models; the chat call below is the real test.
        models = None
        notes.append(f"could not list models: {err}")
    listed = is_served(model, models) if (models is not None and model) else None

    if not model:
        served = f"; this endpoint serves: {', '.join(models[:20])}" if models else ""
        return EndpointCheck(
            ok=False,
            endpoint=endpoint,
            models=models,
            error=f"no model set{served}; choose one in Settings (or KFORGE_MODEL, --model)",
            error_type="LLMConfigError",
            notes=notes,
        )
    if listed is False:
        notes.append(f"model {model!r} is not in the endpoint's model list")
    context = client.context_window(model)
    if not config.context_tokens and models is not None and not client.published_context_window(model):
        notes.append(f"the endpoint does not say how long model {model!r}'s context is: prompts are planned for "
                     f"{context} tokens; set context_tokens if the server holds fewer (Ollama: OLLAMA_CONTEXT_LENGTH)")
    if not test_call:
        return EndpointCheck(ok=True, endpoint=endpoint, models=models, model=model, model_listed=listed, notes=notes,
                             context_tokens=context)

    t0 = time.monotonic()
    try:
        result = client.chat(
            _PROBE, stream=False, max_tokens=_PROBE_MAX_TOKENS, temperature=None, max_retries=0, timeout_s=timeout_s
        )
    except LLMError as err:
        return _failed(endpoint, err, models=models, model=model, model_listed=listed, notes=notes)
    return EndpointCheck(
        ok=True,
        endpoint=endpoint,
        models=models,
        model=model,
        model_listed=listed,
        latency_s=time.monotonic() - t0,
        reply=result.text,
        notes=notes,
        context_tokens=context,
    )
