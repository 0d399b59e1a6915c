"""Measured hardware ceilings (bandwidth, FLOP/s), cached per device in `$KFORGE_CACHE_DIR/ceilings/ceilings.json`
under "<target>:<device name>" (a folder of its own: evaluation children see it through a read-only bind of the
folder, which shows a file replaced after they started; one of the file alone would keep showing the old one). Torch-free: reading the cache must not cost the app a torch import. Measuring is the
platform's job (`Platform.measure_ceilings`) and runs inside an evaluation child. An unknown ceiling stays unknown
(None), never a guessed number.

A ceiling measured while the machine was busy is too low, and every "% of floor" built on it too high (seen: 2.3
GB/s cached for good against 10.6 GB/s measured quietly). So `measure` repeats the platform's measurement
`REPEATS` times and keeps the best of each figure, records when (`measured_at`, UTC), the spread between repeats
and the machine's load, and marks the entry `trusted: false` with the reason when the load per core was above
`MAX_LOAD_PER_CORE` or the repeats disagreed by more than `MAX_SPREAD`. An untrusted entry is used (flagged in
every roofline built on it) and measured again at the next evaluation after `RETRY_UNTRUSTED_S`; a trusted one
replaces it. `python -m kforge_core platforms --measure-ceilings` (and the app's "Measure now") measure on demand.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..paths import cache_dir


def cache_path() -> Path:
    return cache_dir() / "ceilings" / "ceilings.json"


LEGACY_PATH_NAME = "ceilings.json"  # directly in the cache folder, before it had a folder of its own


def _read() -> dict:
    for path in (cache_path(), cache_dir() / LEGACY_PATH_NAME):
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}
    return {}


def cached(target: str, device_name: str) -> dict | None:
    value = _read().get(f"{target}:{device_name}")
    return value if isinstance(value, dict) else None


_unsaved: dict[str, dict] = {}  # measured in an evaluation child, whose cache is read-only: the caller stores them


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
        _unsaved[f"{target}:{device_name}"] = measured


def unsaved() -> dict[str, dict]:
    return dict(_unsaved)


def store_reported(reported) -> None:
    """In the caller: store what a child measured but could not write (`unsaved`, sent back in its result).
    Measured in the candidate's process, like every number of an evaluation today (docs/EVALUATOR.md)."""
    if not isinstance(reported, dict):
        return
    for key, measured in reported.items():
        target, _, device = str(key).partition(":")
        if device and isinstance(measured, dict) and all(_plain(v) or (
                isinstance(v, dict) and all(_plain(w) for w in v.values())) for v in measured.values()):
            store(target, device, measured)


def _plain(value) -> bool:
    # a measurement's figures, dates and reasons; its `spread` and `last_refused` are one level of these
    return isinstance(value, (int, float, str)) or value is None


REPEATS = 3
MAX_SPREAD = 0.15  # (best - worst) / best between repeats of one figure
MAX_LOAD_PER_CORE = 0.5  # 1-minute load average per core, the measurement itself discounted
RETRY_UNTRUSTED_S = 3600.0
FIGURES = ("bandwidth_gbs", "fp32_tflops", "bf16_tflops")


def _load_per_core() -> float:
    try:
        return max(0.0, os.getloadavg()[0] - 1.0) / (os.cpu_count() or 1)  # minus the one core we keep busy
    except OSError:
        return 0.0


def measure(platform, repeats: int = REPEATS, load: Callable[[], float] = _load_per_core,
            now: Callable[[], float] = time.time) -> dict:
    """Measure `repeats` times, keep the best of each figure; say when, how steady, and whether to trust it."""
    before = load()
    runs = [platform.measure_ceilings() or {} for _ in range(max(1, repeats))]
    after = load()
    out: dict = {k: v for k, v in runs[0].items() if k not in FIGURES}
    spread: dict = {}
    for key in FIGURES:
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float)) and r[key] > 0]
        if values:
            out[key] = max(values)  # interference only ever makes a ceiling look lower
            spread[key] = round((max(values) - min(values)) / max(values), 4)
    busy = max(before, after)
    why = []
    if busy > MAX_LOAD_PER_CORE:
        why.append(f"the machine was busy (load {busy:.2f} per core beyond this measurement, limit "
                   f"{MAX_LOAD_PER_CORE:g})")
    unsteady = {k: v for k, v in spread.items() if v > MAX_SPREAD}
    if unsteady:
        why.append("repeats disagreed (" + ", ".join(f"{k} by {v:.0%}" for k, v in unsteady.items()) +
                   f"; limit {MAX_SPREAD:.0%})")
    out.update(measured_at=dt.datetime.fromtimestamp(now(), dt.timezone.utc).isoformat(timespec="seconds"),
               repeats=len(runs), spread=spread, load_per_core=round(busy, 3), trusted=not why,
               untrusted_reason="; ".join(why) or None)
    return out


def remember(platform, measured: dict) -> dict:
    """Cache `measured` unless it is untrusted while a trusted entry exists; return the entry now in use."""
    old = cached(platform.name, platform.device_name())
    if measured.get("trusted") is False and old and old.get("trusted") is not False and "measured_at" in old:
        old = {**old, "last_refused": {"measured_at": measured.get("measured_at"),
                                       "reason": measured.get("untrusted_reason")}}
        store(platform.name, platform.device_name(), old)
        return old
    store(platform.name, platform.device_name(), measured)
    return measured


def _stale_untrusted(value: dict, now: float) -> bool:
    if value.get("trusted") is not False:
        return "measured_at" not in value  # written before ceilings carried a date: measure again, properly
    try:
        at = dt.datetime.fromisoformat(value["measured_at"]).timestamp()
    except (KeyError, ValueError):
        return True
    return now - at > RETRY_UNTRUSTED_S


def for_platform(platform) -> dict:
    """Cached ceilings of this platform's device, measured now (in this process) when never measured, or when the
    cached ones were untrusted and are over an hour old."""
    value = cached(platform.name, platform.device_name()) or _unsaved.get(f"{platform.name}:{platform.device_name()}")
    if value is None or _stale_untrusted(value, time.time()):
        value = remember(platform, measure(platform))
    return value


def label(ceil: dict) -> str:
    """How a figure that uses these ceilings should be dated: 'ceilings measured 2026-11-25 (under load: ...)'."""
    at = (ceil.get("measured_at") or "an unknown date")[:10]
    text = f"ceilings measured {at}"
    if ceil.get("trusted") is False:
        text += f", UNTRUSTED: {ceil.get('untrusted_reason')}"
    return text
