"""What the loop writes into its events about a step: a reply's excerpt, a program's diff against its base, the
recommendations a candidate was built with, the prompts as stored (images left out)."""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any

from ..agents.base import Recommendation
from .types import Attempt

REPLY_EXCERPT_CHARS = 2000


def applied_recommendations(recommendations: list[Recommendation],
                            moves: list[str] | None) -> list[Recommendation]:
    """The step's recommendations, each marked with whether this candidate was built with it. A generator that
    names its moves (the built-in one builds one per step) leaves the others untried for later steps."""
    if moves is None:
        return list(recommendations)
    return [dataclasses.replace(r, applied=r.move in moves) for r in recommendations]


def unified_diff(base: Attempt, iteration: int, code: str) -> str:
    return "".join(difflib.unified_diff(
        (base.code or "").splitlines(keepends=True), code.splitlines(keepends=True),
        fromfile=f"iteration {base.iteration}", tofile=f"iteration {iteration}"))


def excerpt(text: str) -> str:
    text = text or ""
    if len(text) <= REPLY_EXCERPT_CHARS:
        return text
    half = REPLY_EXCERPT_CHARS // 2
    return text[:half] + f"\n… ({len(text) - 2 * half} characters) …\n" + text[-half:]


def history_text(entry: dict) -> str:
    return f"iteration {entry.get('iteration')}: {entry.get('tried') or 'a rewrite'} -> {entry.get('outcome')}"


def model_name(agent: Any) -> str:
    return getattr(agent, "model", None) or agent.label


def for_record(messages: list[dict]) -> list[dict]:
    """Messages as stored in `prompt_sent`: image data URLs (megabytes of base64) replaced by a short note."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    url = (part.get("image_url") or {}).get("url", "")
                    mime = url[5:url.find(";")] if url.startswith("data:") and ";" in url else "image"
                    parts.append({"type": "image_url",
                                  "image_url": {"url": f"[{mime}, {math.ceil(len(url) * 3 / 4)} bytes, not stored]"}})
                else:
                    parts.append(part)
            m = {**m, "content": parts}
        out.append(m)
    return out
