"""Support shared by the app's tests: the in-process AppTest ones (tests/test_app_*.py) and the browser ones here.

- `app_env`: a private run store, settings file and cache folder through the environment the app reads, no LLM
  endpoint configured, and every Streamlit cache cleared before and after.
- `real_targets()`: the platform listing of this machine, discovered once per test session through the app's own
  child job; `use_targets` hands it to the app, so an AppTest does not wait seconds for discovery each time.
- `app()`: an AppTest of the router (`app/main.py`) on a given page.
"""

from __future__ import annotations

import functools
from concurrent.futures import Future
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAIN = str(REPO / "app" / "main.py")
LLM_ENV = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL", "KFORGE_ANALYSIS_MODEL", "KFORGE_RUN_BASE_URL")
# AppTest runs the scripts in this process; the first run imports plotly, pygments and openai (seconds on 2 busy
# cores), so the per-run timeout is generous.
APPTEST_TIMEOUT_S = 120


def clear_streamlit_caches() -> None:
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()


@pytest.fixture
def app_env(tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("KFORGE_SETTINGS", str(tmp_path / "settings.toml"))
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)
    clear_streamlit_caches()
    yield tmp_path
    clear_streamlit_caches()


@functools.lru_cache(maxsize=1)
def real_targets() -> list[dict]:
    from app.child import run_job

    return run_job("targets", timeout_s=300)


@pytest.fixture
def use_targets(monkeypatch):
    """Serve this machine's real platform listing (discovered once per session) to the app without a child."""
    from app import services

    listing = real_targets()

    def done() -> Future:
        future: Future = Future()
        future.set_result(listing)
        return future

    monkeypatch.setattr(services, "start_target_discovery", done)
    return listing


def app(page: str | None = None, **query):
    """An AppTest of the router, on `page` ("runs", "compare", "settings"; None: the default, Synthesize)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=APPTEST_TIMEOUT_S)
    for key, value in query.items():
        at.query_params[key] = value
    if page is not None:
        at.switch_page(f"../pages/{page}.py")
    return at


def texts(at) -> str:
    """Everything the page wrote as markdown, captions, alerts and HTML, as one string to search."""
    parts = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "title", "subheader"):
        parts += [str(e.value) for e in getattr(at, kind)]
    parts += [str(e.proto.body) for e in at.get("html")]
    return "\n".join(parts)


def stop_run(run_id: str, db=None, wait_s: float = 15.0) -> None:
    """Don't leave a detached worker running after a test: ask it to stop (it stops at its next check point), then
    SIGTERM its process group (the worker turns SIGTERM into a cancelled run with its record closed)."""
    import os
    import signal
    import time

    from kforge_core.loop import cancel_run
    from kforge_core.store import open_store

    cancel_run(db, run_id)
    deadline = time.monotonic() + wait_s
    while True:
        with open_store(db) as s:
            run = s.get_run(run_id)
        if run["status"] not in ("queued", "running"):
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if run.get("worker_pid"):
        try:
            os.killpg(run["worker_pid"], signal.SIGTERM)  # its own session: the group holds its children too
        except (ProcessLookupError, PermissionError):
            pass
