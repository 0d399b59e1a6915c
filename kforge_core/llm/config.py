"""Which endpoint, key and models to use: `LLMConfig`, and `resolve_config` that merges the sources.

Priority, per field: explicit flags > environment > settings file > defaults.

    environment           OPENAI_BASE_URL, OPENAI_API_KEY, KFORGE_MODEL, KFORGE_ANALYSIS_MODEL
    settings file (TOML)  $KFORGE_SETTINGS, else ~/.config/kforge/settings.toml; section [llm] with
                          base_url, api_key, model, analysis_model (and optionally timeout_s, max_retries,
                          max_tokens, temperature, context_tokens); section [pricing] with
                          prompt_price_per_1m_tokens, completion_price_per_1m_tokens (every call, unless the
                          analysis agent has its own: analysis_prompt_price_per_1m_tokens,
                          analysis_completion_price_per_1m_tokens). A missing file counts as empty.

Generation and analysis may use different models: `model` and `analysis_model` (falls back to `model`).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from .errors import LLMConfigError, redact_url

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers (vLLM, Ollama, LM Studio) ignore the key, but the protocol (and the openai package) wants one.
PLACEHOLDER_API_KEY = "not-needed"
DEFAULT_SETTINGS_PATH = Path("~/.config/kforge/settings.toml")

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "KFORGE_MODEL"
ENV_ANALYSIS_MODEL = "KFORGE_ANALYSIS_MODEL"
ENV_SETTINGS = "KFORGE_SETTINGS"

Role = Literal["generation", "analysis"]


@dataclass(frozen=True, repr=False)
class LLMConfig:
    """Everything the client needs. Immutable; derive variants with `dataclasses.replace` or `for_role`."""

    base_url: str | None = None
    """OpenAI-compatible API root including the version path, e.g. "http://localhost:11434/v1" (Ollama),
    "http://localhost:8000/v1" (vLLM), "https://openrouter.ai/api/v1". None: the OpenAI API."""
    api_key: str | None = None
    """Secret bearer key. None: a placeholder is sent (local servers need none). Never shown in reprs/errors."""
    model: str | None = None
    """Model id used for generation (and for analysis unless `analysis_model` is set)."""
    analysis_model: str | None = None
    """Model id for the performance-analysis agent. None: same as `model`."""
    timeout_s: float = 300.0
    """Seconds without progress before an attempt is abandoned: applies to connecting and to *each* read, so a
    stream that goes silent this long fails, while a long answer that keeps streaming does not."""
    max_retries: int = 3
    """Retries after the first attempt, for transient failures only (connection, timeout, 408/409/429/5xx)."""
    max_tokens: int | None = None
    """Upper bound on completion tokens per answer. None: the server's default (often the model's maximum)."""
    temperature: float | None = None
    """Sampling temperature (0 = most deterministic). None: the server's default."""
    context_tokens: int | None = None
    """The model's context window in tokens. None: what the server publishes (GET /models) or reveals, else
    `context.DEFAULT_CONTEXT_TOKENS`. Set it for servers that publish nothing (Ollama: its OLLAMA_CONTEXT_LENGTH)."""
    price_per_mtok: tuple[float, float] | None = None
    """(prompt, completion) price in currency units per million tokens (the generation agent's, and the analysis
    agent's unless it has its own), for the cost shown with the usage; None: not priced."""
    analysis_price_per_mtok: tuple[float, float] | None = None
    """The analysis agent's own price. None: `price_per_mtok`."""
    retry_base_delay_s: float = 1.0
    """First backoff delay in seconds; it doubles on each retry (with a little jitter)."""
    retry_max_delay_s: float = 30.0
    """Cap, in seconds, on one backoff delay."""
    max_retry_after_s: float = 60.0
    """Longest server-requested wait (Retry-After, seconds) we honour; a longer one fails at once with the hint."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Where each resolved field came from: "flag", "env:NAME", "settings:PATH" (for the Settings page)."""

    def __post_init__(self) -> None:
        problems = []
        if self.base_url and not self.base_url.lower().startswith(("http://", "https://")):
            problems.append(f"base_url must start with http:// or https:// (got {redact_url(self.base_url)!r})")
        if not self.timeout_s or self.timeout_s <= 0:
            problems.append(f"timeout_s must be > 0 (got {self.timeout_s})")
        if self.max_retries < 0:
            problems.append(f"max_retries must be >= 0 (got {self.max_retries})")
        if self.max_tokens is not None and self.max_tokens <= 0:
            problems.append(f"max_tokens must be > 0 (got {self.max_tokens})")
        if self.context_tokens is not None and self.context_tokens <= 0:
            problems.append(f"context_tokens must be > 0 (got {self.context_tokens})")
        for name in ("price_per_mtok", "analysis_price_per_mtok"):
            price = getattr(self, name)
            if price is not None and (len(price) != 2 or any(not isinstance(p, (int, float)) or p < 0
                                                              for p in price)):
                problems.append(f"{name} must be two numbers >= 0: (prompt, completion) per million tokens")
        if self.retry_base_delay_s < 0 or self.retry_max_delay_s < 0 or self.max_retry_after_s < 0:
            problems.append("retry delays must be >= 0")
        if problems:
            raise LLMConfigError("invalid LLM settings: " + "; ".join(problems))

    # ---- derived values
    @property
    def effective_base_url(self) -> str:
        return self.base_url or DEFAULT_BASE_URL

    @property
    def endpoint(self) -> str:
        """The base URL safe to show (no credentials, no query)."""
        return redact_url(self.effective_base_url)

    @property
    def effective_api_key(self) -> str:
        return self.api_key or PLACEHOLDER_API_KEY

    @property
    def is_configured(self) -> bool:
        """An endpoint counts as configured when we know where to go (base_url) or have a key for the default."""
        return bool(self.base_url or self.api_key)

    def model_for(self, role: Role = "generation") -> str | None:
        if role == "analysis":
            return self.analysis_model or self.model
        return self.model

    def price_for(self, role: Role = "generation") -> tuple[float, float] | None:
        """(prompt, completion) price per million tokens of the role's calls, when one is set."""
        price = self.price_per_mtok
        if role == "analysis" and self.analysis_price_per_mtok is not None:
            price = self.analysis_price_per_mtok
        return (float(price[0]), float(price[1])) if price is not None else None

    def for_role(self, role: Role) -> LLMConfig:
        """This config with `model` set to the role's model (for a client dedicated to one agent)."""
        return dataclasses.replace(self, model=self.model_for(role))

    def __repr__(self) -> str:
        shown = []
        for f in dataclasses.fields(self):
            if f.name == "sources":
                continue
            value = getattr(self, f.name)
            if f.name == "api_key" and value:
                value = "***"
            shown.append(f"{f.name}={value!r}")
        return f"LLMConfig({', '.join(shown)})"


def is_configured(config: LLMConfig | None = None) -> bool:
    """True when an LLM endpoint is known (from `config`, or from flags-less resolution of env + settings)."""
    return (config if config is not None else resolve_config()).is_configured


def settings_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(ENV_SETTINGS) or DEFAULT_SETTINGS_PATH).expanduser()


def load_settings(path: str | os.PathLike[str], table: str = "llm") -> dict[str, Any]:
    """One table (`[llm]` by default) of a settings file; {} when the file or the table does not exist."""
    path = Path(path).expanduser()
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as err:
        raise LLMConfigError(f"settings file {path} is not valid TOML ({err}); fix or delete it") from None
    except OSError as err:
        raise LLMConfigError(f"cannot read settings file {path} ({err.strerror})") from None
    values = data.get(table, {})
    if not isinstance(values, dict):
        raise LLMConfigError(f"settings file {path}: [{table}] must be a table")
    return values


# The [pricing] table (the app's Settings page writes the first two): role -> (prompt key, completion key).
PRICE_KEYS = {"generation": ("prompt_price_per_1m_tokens", "completion_price_per_1m_tokens"),
              "analysis": ("analysis_prompt_price_per_1m_tokens", "analysis_completion_price_per_1m_tokens")}


def _file_prices(path: Path) -> dict[str, Any]:
    """price_per_mtok / analysis_price_per_mtok from the [pricing] table, where both of a pair are set."""
    table = load_settings(path, "pricing")
    out: dict[str, Any] = {}
    for role, field_name in (("generation", "price_per_mtok"), ("analysis", "analysis_price_per_mtok")):
        values = [table.get(k) for k in PRICE_KEYS[role]]
        if all(v is None for v in values):
            continue
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
            raise LLMConfigError(f"settings file {path}: [pricing] {' and '.join(PRICE_KEYS[role])} must both be "
                                 "numbers (price per million tokens)")
        out[field_name] = (float(values[0]), float(values[1]))
    return out


_STR_FIELDS = ("base_url", "api_key", "model", "analysis_model")
_NUM_FIELDS = {"timeout_s": float, "max_retries": int, "max_tokens": int, "temperature": float,
               "context_tokens": int}
_ENV_FOR = {"base_url": ENV_BASE_URL, "api_key": ENV_API_KEY, "model": ENV_MODEL, "analysis_model": ENV_ANALYSIS_MODEL}


def resolve_config(
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    model: str | None = None,
    analysis_model: str | None = None,
    timeout_s: float | None = None,
    max_retries: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    context_tokens: int | None = None,
    settings_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    **extra: Any,
) -> LLMConfig:
    """Merge flags > env > settings file > defaults. None (or "") means "not given" for every flag.

    `settings_path` overrides $KFORGE_SETTINGS and the default path; `env` defaults to `os.environ`;
    `extra` passes other `LLMConfig` fields through unchanged (e.g. retry delays in tests)."""
    env = os.environ if env is None else env
    path = Path(settings_path).expanduser() if settings_path is not None else _settings_path(env)
    file_values = load_settings(path)
    flags = dict(
        base_url=base_url,
        api_key=api_key,
        model=model,
        analysis_model=analysis_model,
        timeout_s=timeout_s,
        max_retries=max_retries,
        max_tokens=max_tokens,
        temperature=temperature,
        context_tokens=context_tokens,
        price_per_mtok=extra.pop("price_per_mtok", None),
        analysis_price_per_mtok=extra.pop("analysis_price_per_mtok", None),
    )
    file_values = {**file_values, **_file_prices(path)}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, flag in flags.items():
        env_name = _ENV_FOR.get(name)
        if flag is not None and flag != "":
            values[name], sources[name] = flag, "flag"
        elif env_name and env.get(env_name):
            values[name], sources[name] = env[env_name], f"env:{env_name}"
        elif file_values.get(name) not in (None, ""):
            values[name], sources[name] = _typed(name, file_values[name], path), f"settings:{path}"
    return LLMConfig(**values, **extra, sources=sources)


_settings_path = settings_path  # resolve_config's parameter shadows the function's name


def _typed(name: str, value: Any, path: Path) -> Any:
    """Settings-file values are user-written: check their types here, with the file named in the error."""
    if name in _STR_FIELDS:
        if not isinstance(value, str):
            raise LLMConfigError(f"settings file {path}: [llm] {name} must be a string")
        return value
    kind = _NUM_FIELDS.get(name)
    if kind is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        expected = "an integer" if kind is int else "a number"
        raise LLMConfigError(f"settings file {path}: [llm] {name} must be {expected}")
    return kind(value)
