"""Measured hardware ceilings for the Settings page: read from `kforge_core.eval.ceilings`' cache (torch-free), measured
in a child process ("Measure now" runs `measure_in_this_process` through `app.child`).
"""

from __future__ import annotations

import json

from kforge_core.eval.ceilings import cache_path, cached

MEASURE_TIMEOUT_S = 600


def measure(target: str) -> tuple[bool, str]:
    """Measure `target`'s ceilings in a child process: (ok, a one-line message)."""
    from .child import ChildJobError, run_job

    try:
        result = run_job("ceilings", {"target": target}, timeout_s=MEASURE_TIMEOUT_S)
    except ChildJobError as exc:
        return False, str(exc)
    return True, json.dumps(result)


def measure_in_this_process(target: str) -> dict:
    """Measure again and replace the cached entry (runs in the child: imports torch)."""
    from kforge_core.eval import ceilings as cache
    from kforge_core.platform import get_platform

    platform = get_platform(target, require_available=True)
    return cache.remember(platform, cache.measure(platform))
