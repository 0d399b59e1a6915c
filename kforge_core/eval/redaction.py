"""Secrets known to KForge, removed from anything a child printed before it reaches a verdict, the store or the UI.

The child never holds these (scrubbed environment, settings file outside its root): this is the second line, for a
fallback without isolation and for whatever a future gap lets through. Known secrets are the values of the
caller's credential-like environment variables (the pattern `child_setup.child_environment` strips) and the settings
file's api_key. Only values of 8 characters or more are redacted (shorter ones would mangle ordinary text).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

MARK = "[redacted]"
_CREDENTIAL = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)|^OPENAI_|^ANTHROPIC_",
                         re.IGNORECASE)


def known_secrets() -> list[str]:
    values = {v for k, v in os.environ.items() if _CREDENTIAL.search(k)}
    try:
        from ..llm.config import load_settings, settings_path

        key = load_settings(settings_path()).get("api_key")
        if isinstance(key, str):
            values.add(key)
    except Exception:  # noqa: BLE001 - an unreadable settings file holds no key we could leak
        pass
    return sorted((v for v in values if len(v) >= 8), key=len, reverse=True)


def redactor(values: list[str] | None = None) -> Callable[[Any], Any]:
    """A function that redacts the known secrets from a string or, recursively, a JSON-like value."""
    values = known_secrets() if values is None else values
    pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def redact(obj: Any) -> Any:
        if pattern is None:
            return obj
        if isinstance(obj, str):
            return pattern.sub(MARK, obj)
        if isinstance(obj, dict):
            return {redact(k): redact(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [redact(v) for v in obj]
        return obj

    return redact
