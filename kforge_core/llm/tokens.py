"""Token-count estimates for servers that report no usage.

~4 characters per token is the usual rule of thumb for English and code with BPE tokenizers; good enough for
budgets and charts, and results built from it are marked `usage_estimated=True`.
"""

from __future__ import annotations

import math
from typing import Iterable

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def estimate_prompt_tokens(messages: Iterable[dict]) -> int:
    """Text parts only: image cost depends on the model and cannot be guessed from the data URL."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += estimate_tokens(content)
        elif isinstance(content, list):
            total += sum(estimate_tokens(p.get("text") or "") for p in content if isinstance(p, dict))
    return total
