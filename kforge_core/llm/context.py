"""How many tokens a model's context holds, and how many of them a prompt may use.

Where the window comes from, most trusted first:
  1. `LLMConfig.context_tokens` (a setting: the user knows what the server loaded, e.g. OLLAMA_CONTEXT_LENGTH);
  2. what the server said: a context-length refusal ("maximum context length is 32768 tokens"), or a reply whose
     reported `prompt_tokens` is far below our estimate (Ollama cuts the prompt silently to its window);
  3. GET /models, where servers publish it (vLLM `max_model_len`, OpenRouter `context_length`, LM Studio
     `loaded_context_length` / `max_context_length`, llama.cpp `meta.n_ctx_train`);
  4. `DEFAULT_CONTEXT_TOKENS`.

Prompt sizes are estimated with `tokens.estimate_tokens` (~4 characters per token). Code tokenizes denser than
prose (~3 to 3.5 characters per token with common BPE vocabularies), so a prompt is fitted into
`PROMPT_SHARE` of what the window leaves after the answer's reserve.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

DEFAULT_CONTEXT_TOKENS = 32768
# Of the tokens left after the completion reserve, the share the prompt's *estimate* may fill (estimator slack).
PROMPT_SHARE = 0.75
# The answer's reserve when max_tokens is not set: a quarter of the window, at most this many tokens.
MAX_COMPLETION_RESERVE = 8192
# The smallest window we will plan for (below it no useful kernel program fits anyway).
MIN_CONTEXT_TOKENS = 2048
# A reported prompt_tokens under this share of our estimate means the server dropped part of the prompt.
TRUNCATION_RATIO = 0.5
# ... once the prompt is big enough for the estimate to be meaningful (small prompts carry chat-template noise).
TRUNCATION_MIN_ESTIMATE = 1000

# /models fields that carry a window, in order of preference (the loaded size beats the trained maximum).
_MODEL_FIELDS = ("loaded_context_length", "max_model_len", "context_length", "context_window", "max_context_length",
                 "n_ctx", "max_input_tokens")

# How servers word a prompt that does not fit: OpenAI/vLLM ("maximum context length is 32768 tokens"), vLLM's
# max_tokens variant ("'max_tokens' ... is too large ... context length"), LM Studio ("loaded with context length
# of only 4096 tokens"), llama.cpp ("exceeds the available context size"), TGI ("must have less than 4096
# tokens"), Anthropic-compatible proxies ("prompt is too long").
_CONTEXT_REFUSAL = re.compile(
    r"context[ _](?:length|size|window)|maximum context|prompt is too long|too many (?:input )?tokens|"
    r"input tokens? exceed|must have less than \d+ tokens|exceed_context_size", re.IGNORECASE)
_WINDOW_IN_MESSAGE = (
    re.compile(r"maximum context length (?:is|of) (\d{3,8})", re.IGNORECASE),
    re.compile(r"context (?:length|size|window) (?:of |is )?(?:only )?(\d{3,8})", re.IGNORECASE),
    re.compile(r"n_ctx\D{0,6}(\d{3,8})", re.IGNORECASE),
    re.compile(r"must have less than (\d{3,8}) tokens", re.IGNORECASE),
)


def is_context_refusal(message: str) -> bool:
    return bool(_CONTEXT_REFUSAL.search(message or ""))


def window_from_message(message: str) -> int | None:
    """The window a context-length refusal names, if it names one."""
    for pattern in _WINDOW_IN_MESSAGE:
        m = pattern.search(message or "")
        if m:
            return int(m.group(1))
    return None


def window_from_model_entry(entry: Mapping[str, Any]) -> int | None:
    """The window a GET /models entry publishes (None when it publishes none)."""
    for name in _MODEL_FIELDS:
        value = entry.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    meta = entry.get("meta")
    if isinstance(meta, Mapping):
        for name in ("n_ctx", "n_ctx_train"):
            value = meta.get(name)
            if isinstance(value, int) and value > 0:
                return value
    return None


def completion_reserve(window: int, max_tokens: int | None) -> int:
    """Tokens kept free for the answer."""
    if max_tokens:
        return min(max_tokens, window // 2)
    return min(window // 4, MAX_COMPLETION_RESERVE)


def prompt_budget(window: int, max_tokens: int | None) -> int:
    """Estimated prompt tokens that fit a `window`-token context with room for the answer."""
    window = max(window, MIN_CONTEXT_TOKENS)
    return int((window - completion_reserve(window, max_tokens)) * PROMPT_SHARE)


def truncation_warning(estimate: int, reported: int, model: str) -> str | None:
    """A warning when the server says it read far fewer prompt tokens than we sent (it cut the prompt)."""
    if estimate < TRUNCATION_MIN_ESTIMATE or reported >= estimate * TRUNCATION_RATIO:
        return None
    return (f"the server reported {reported} prompt tokens for a prompt estimated at {estimate}: it probably cut the "
            f"prompt to its context window (Ollama does so silently; raise OLLAMA_CONTEXT_LENGTH, or set [llm] "
            f"context_tokens to the window model {model!r} really has, so that KForge clips the prompt itself)")
