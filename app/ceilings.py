"""Measured hardware ceilings for the Settings page: read from the roofline cache, measured in a child process.

The cache is `kforge_core.roofline`'s (`$KFORGE_CACHE_DIR/ceilings.json`, keyed "<target>:<device name>"). That
module imports torch, which the app process does not, so the path rule is restated here (a test keeps the two in
step) and "Measure now" runs `measure_in_this_process` through `app.child`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MEASURE_TIMEOUT_S = 600


def cache_path() -> Path:
    # Same rule as kforge_core.roofline._cache_path.
    return Path(os.environ.get("KFORGE_CACHE_DIR") or Path.home() / ".cache" / "kforge") / "ceilings.json"


def cached(target: str, device_name: str) -> dict | None:
    """The cached ceilings of a device, or None when never measured (unknown stays unknown)."""
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return None
    value = data.get(f"{target}:{device_name}")
    return value if isinstance(value, dict) else None


def measure(target: str) -> tuple[bool, str]:
    """Measure `target`'s ceilings in a child process: (ok, a one-line message)."""
    from .child import ChildJobError, run_job

    try:
        result = run_job("ceilings", {"target": target}, timeout_s=MEASURE_TIMEOUT_S)
    except ChildJobError as exc:
        return False, str(exc)
    return True, json.dumps(result)


def measure_in_this_process(target: str) -> dict:
    """Drop the cached entry and measure again (runs in the child: imports torch)."""
    from kforge_core.platform import get_platform
    from kforge_core.roofline import ceilings

    platform = get_platform(target, require_available=True)
    path = cache_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    key = f"{platform.name}:{platform.device_name()}"
    if key in data:  # without the entry, `ceilings` measures and writes the cache (atomically)
        del data[key]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
    return ceilings(platform)
