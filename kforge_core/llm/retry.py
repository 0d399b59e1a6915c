"""When to retry and how long to wait: pure functions, no I/O, so the policy is easy to read and to test."""

from __future__ import annotations

import email.utils
import math
import random
import time
from typing import Mapping

# 408 request timeout, 409 conflict (OpenAI uses it for transient lock contention), 429 rate limit, 5xx server side.
RETRYABLE_STATUS = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUS or 500 <= status <= 599


def backoff_delay(retry: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Delay before retry number `retry` (1-based): base * 2**(retry-1), capped, minus up to 25 % jitter so that
    parallel workers that failed together do not retry together."""
    raw = min(cap_s, base_s * (2 ** max(0, retry - 1)))
    jitter = (rng or random).uniform(0.0, 0.25)
    return max(0.0, raw * (1.0 - jitter))


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms` (OpenAI), or `Retry-After` as seconds or an HTTP date; None if absent
    or unparsable."""
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = lower.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) / scale
        except ValueError:
            if name != "retry-after":
                continue
            try:
                when = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                return None
            value = when.timestamp() - (time.time() if now is None else now)
        if math.isfinite(value):
            return max(0.0, value)
    return None
