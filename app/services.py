"""The app's access to the core: the run store, the platforms, the loop, the settings file.

Every page goes through these helpers, so a page never opens SQLite or parses TOML itself. Nothing here imports
streamlit except the cached platform listing.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run app/main.py` puts app/ on sys.path, not the repository root
    sys.path.insert(0, str(ROOT))

from kforge_core.llm import LLMConfigError, resolve_config, settings_path  # noqa: E402
from kforge_core.llm.config import PRICE_KEYS as LLM_PRICE_KEYS  # noqa: E402
from kforge_core.store import RunStore, open_store, resolve_db_path  # noqa: E402

# How often a page showing a live run asks the store for new events. A poll is cheap for the store (one indexed
# range read of a local WAL-mode SQLite file) but not for the browser, which redraws the run view each time:
# bench/ui_latency.py on the 2-core box measured the browser's main thread 38 % busy at 0.4 s (latency p90 1.3 s,
# the renderer falling behind) and 24 % at 0.75 s (median 0.41 s, p90 0.88 s).
POLL_INTERVAL_S = 0.75
TARGETS_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------------------------------- run store

def db_path() -> Path:
    """`$KFORGE_DB`, else the store's default (`~/.local/share/kforge/runs.db`). Read on every call: tests change it."""
    return resolve_db_path()


@contextlib.contextmanager
def store() -> Iterator[RunStore]:
    """A store for this script run only: a connection belongs to one thread, and Streamlit runs each session (and
    each fragment rerun) on its own script thread. Opening is cheap (a connect, pragmas, one read)."""
    s = open_store(db_path())
    try:
        yield s
    finally:
        s.close()


def files_dir() -> Path:
    """Where the app keeps files a run needs (uploaded profiler screenshots): next to the run store."""
    return db_path().parent / "kforge-files"


# --------------------------------------------------------------------------------------------------- the loop

def loop_module() -> ModuleType | None:
    """`kforge_core.loop`, or None while it is not installed (the Synthesize page then says why it cannot start)."""
    try:
        return importlib.import_module("kforge_core.loop")
    except ModuleNotFoundError as exc:
        if exc.name in ("kforge_core.loop", "kforge_core.loop.worker"):
            return None
        raise


# --------------------------------------------------------------------------------------------------- platforms

@dataclass(frozen=True)
class TargetInfo:
    """What the app shows about a platform: its declared attributes and its availability here."""

    name: str
    title: str
    kernel_language: str
    device_type: str
    device_name: str
    available: bool
    reason: str
    has_profiler: bool
    accepts_profiler_screenshots: bool
    # what a candidate imports (the Workbench's blank template) and the single-shot example's files
    candidate_module: str = ""
    candidate_api: tuple[str, ...] = ()
    example_problem: str = ""
    example_candidate: str = ""


def discover_targets() -> list[TargetInfo]:
    from kforge_core.platform import all_platforms

    found = []
    for name, p in all_platforms().items():
        try:
            avail = p.availability()
            ok, reason = avail.ok, avail.reason
        except Exception as exc:  # noqa: BLE001 - a broken third-party platform must not take the page down
            ok, reason = False, f"availability check failed: {exc}"
        try:
            device = p.device_name()
        except Exception:  # noqa: BLE001 - same reason
            device = p.device_type
        found.append(TargetInfo(name=name, title=p.title or name, kernel_language=p.kernel_language or "cpp",
                                device_type=p.device_type, device_name=device, available=ok, reason=reason,
                                has_profiler=p.has_profiler,
                                accepts_profiler_screenshots=p.accepts_profiler_screenshots,
                                candidate_module=p.module_name or f"platforms.{name}",
                                candidate_api=tuple(p.candidate_api), **_example_paths(p)))
    return found


def _example_paths(platform) -> dict[str, str]:
    try:
        example = platform.example()
    except Exception:  # noqa: BLE001 - a third-party platform without an example still lists
        return {}
    return {"example_problem": str(example.problem), "example_candidate": str(example.candidate)}


def start_target_discovery():
    """Discover the platforms once per server process, in a child (`app.child targets`), in the background: the
    router calls this on every page run so the answer is usually ready before a page needs it. Discovery imports
    every platform module and CUDA's availability needs torch, which the app process does without."""
    import streamlit as st

    @st.cache_resource(show_spinner=False)
    def _future():
        from concurrent.futures import ThreadPoolExecutor

        from .child import run_job

        return ThreadPoolExecutor(1, thread_name_prefix="kforge-targets").submit(
            run_job, "targets", None, TARGETS_TIMEOUT_S)

    return _future()


def targets() -> list[TargetInfo]:
    """The platforms and their availability here ([] when discovery failed; the error is shown in place)."""
    import streamlit as st

    from .child import ChildJobError

    future = start_target_discovery()
    if not future.done():
        with st.spinner("Looking for targets on this machine…"):
            future.exception()  # waits
    try:
        return [TargetInfo(**t) for t in future.result()]
    except ChildJobError as exc:
        st.error(f"Could not list the targets: {exc}", icon=":material/error:")
        return []


def target_info(name: str | None, wait: bool = True) -> TargetInfo | None:
    """One target's info. `wait=False` answers None while discovery is still running (the run view then shows the
    target's name and highlights kernels as C++ rather than make a stored run wait seconds for its first paint)."""
    if not wait:
        future = start_target_discovery()
        if not future.done() or future.exception() is not None:
            return None
    return next((t for t in targets() if t.name == name), None)


# --------------------------------------------------------------------------------------------------- settings

PRICING_TABLE = "pricing"
PRICE_KEYS = LLM_PRICE_KEYS["generation"]  # the run's price; the LLM agents read the same keys (llm.config)


def read_settings_file(path: Path | None = None) -> dict[str, Any]:
    """The whole settings file as a dict ({} when it does not exist). Raises LLMConfigError when it is not TOML."""
    path = path or settings_path()
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as err:
        raise LLMConfigError(f"settings file {path} is not valid TOML ({err}); fix or delete it") from None


def prices() -> tuple[float | None, float | None]:
    """(prompt, completion) price per 1M tokens from the settings file; None where not set (then no cost is shown)."""
    try:
        table = read_settings_file().get(PRICING_TABLE, {})
    except LLMConfigError:
        return None, None
    out = []
    for key in PRICE_KEYS:
        value = table.get(key) if isinstance(table, dict) else None
        out.append(float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None)
    return out[0], out[1]


def write_settings(updates: dict[str, dict[str, Any]], path: Path | None = None) -> Path:
    """Merge `{table: {key: value}}` into the settings file (a value of None removes the key) and write it back.

    Other tables and keys are kept; comments are not (tomllib does not keep them). The file holds an API key, so
    it is written owner-only (0600), atomically (a temporary file renamed over the old one).
    """
    path = path or settings_path()
    data = read_settings_file(path)
    for table, values in updates.items():
        current = data.setdefault(table, {})
        if not isinstance(current, dict):
            raise LLMConfigError(f"settings file {path}: [{table}] must be a table")
        for key, value in values.items():
            if value is None or value == "":
                current.pop(key, None)
            else:
                current[key] = value
        if not current:
            data.pop(table)
    text = dump_toml(data, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".settings-", suffix=".toml")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def dump_toml(data: dict[str, Any], path: Path) -> str:
    """TOML for what the settings file holds: top-level tables of scalars (no TOML writer ships with Python)."""
    lines: list[str] = []
    top = {k: v for k, v in data.items() if not isinstance(v, dict)}
    for key, value in top.items():
        lines.append(f"{_toml_key(key)} = {_toml_value(value, key, path)}")
    for table, values in data.items():
        if not isinstance(values, dict):
            continue
        if lines:
            lines.append("")
        lines.append(f"[{_toml_key(table)}]")
        for key, value in values.items():
            lines.append(f"{_toml_key(key)} = {_toml_value(value, f'{table}.{key}', path)}")
    return "\n".join(lines) + "\n"


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def _toml_value(value: Any, where: str, path: Path) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return "[" + ", ".join(_toml_value(v, where, path) for v in value) + "]"
    raise LLMConfigError(f"settings file {path}: cannot rewrite {where} (nested values); edit the file by hand")


def llm_defaults() -> tuple[Any, str | None]:
    """(LLMConfig from env + settings file, or None; the one-line error when the settings file is unusable)."""
    try:
        return resolve_config(), None
    except LLMConfigError as err:
        return None, str(err)


def mask_key(key: str | None) -> str:
    """Enough of a key to recognise it, never enough to use it."""
    if not key:
        return ""
    return "…" + key[-4:] if len(key) > 12 else "…"
