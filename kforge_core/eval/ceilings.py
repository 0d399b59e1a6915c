"""Measured hardware ceilings (bandwidth, FLOP/s), cached per device in `$KFORGE_CACHE_DIR/ceilings.json` under
"<target>:<device name>". Torch-free: reading the cache must not cost the app a torch import. Measuring is the
platform's job (`Platform.measure_ceilings`) and runs inside an evaluation child. An unknown ceiling stays unknown
(None), never a guessed number.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..paths import cache_dir


def cache_path() -> Path:
    return cache_dir() / "ceilings.json"


def _read() -> dict:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def cached(target: str, device_name: str) -> dict | None:
    value = _read().get(f"{target}:{device_name}")
    return value if isinstance(value, dict) else None


def store(target: str, device_name: str, measured: dict) -> None:
    data = _read()
    data[f"{target}:{device_name}"] = measured
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)  # atomic: concurrent readers see the old or the new file, never half of one
    except OSError:
        pass


def for_platform(platform) -> dict:
    """Cached ceilings of this platform's device, measured now (in this process) when never measured."""
    value = cached(platform.name, platform.device_name())
    if value is None:
        value = platform.measure_ceilings() or {}
        store(platform.name, platform.device_name(), value)
    return value
