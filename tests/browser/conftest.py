"""Browser fixtures: a real `streamlit run app/main.py` on a free port over a private store, and Debian's chromium
driven by Playwright (browser downloads are blocked here, so Playwright's own browsers are never used).

Screenshots and the server log go to test-artifacts/ (gitignored)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlsplit
from pathlib import Path

import pytest

from tests.browser.appkit import LLM_ENV, REPO

ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = os.environ.get("KFORGE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SERVER_START_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    """`streamlit run app/main.py` in its own process group, with its own store; stop() ends the group."""

    def __init__(self, db: Path, env: dict[str, str] | None = None, log: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = db
        self.env = {k: v for k, v in os.environ.items() if k not in LLM_ENV}
        self.env.update(KFORGE_DB=str(db), KFORGE_SETTINGS=str(db.parent / "settings.toml"), **(env or {}))
        self.log_path = log or db.parent / "streamlit.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> AppServer:
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.headless=true",
             f"--server.port={self.port}", "--server.address=127.0.0.1", "--browser.gatherUsageStats=false"],
            cwd=REPO, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited early; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"streamlit did not answer within {SERVER_START_TIMEOUT_S} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
        self.log.close()


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium not found at {CHROMIUM}: apt-get install -y chromium (Playwright's own browser "
                    "downloads are not used)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -r requirements-dev.txt)")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


@pytest.fixture(scope="module")
def app_server(tmp_path_factory, browser):
    server = AppServer(tmp_path_factory.mktemp("app") / "runs.db", log=ARTIFACTS / "streamlit.log").start()
    yield server
    server.stop()


@pytest.fixture
def page(browser, app_server):
    # Tall: Streamlit scrolls inside its own container, so a full-page screenshot is one viewport.
    context = browser.new_context(viewport={"width": 1440, "height": 1800})
    page = context.new_page()
    page.set_default_timeout(120_000)  # a loaded 2-core CI box redraws slowly
    # What the page did wrong, for the assertions and written next to the screenshots (a script error in the
    # browser shows up only here: the page may just go blank):
    # - kf_errors: uncaught script errors and renderer crashes;
    # - kf_external: requests to any host but the app's (the app must work with no internet);
    # - kf_log: those, plus console errors and failed requests.
    page.kf_errors, page.kf_external, page.kf_log = [], [], []

    def error(text: str) -> None:
        page.kf_errors.append(text)
        page.kf_log.append(text)

    def request(req) -> None:
        host = urlsplit(req.url).hostname
        if req.url.startswith(("http:", "https:", "ws:", "wss:")) and host not in ("127.0.0.1", "localhost"):
            page.kf_external.append(req.url)
            page.kf_log.append(f"external request: {req.url}")

    page.on("pageerror", lambda exc: error(f"pageerror: {exc}"))
    page.on("crash", lambda _: error("crash: the page's renderer crashed"))
    page.on("request", request)
    page.on("console", lambda msg: page.kf_log.append(f"console.error: {msg.text} ({msg.location.get('url')})")
            if msg.type == "error" else None)
    page.on("requestfailed", lambda req: page.kf_log.append(f"request failed: {req.url} ({req.failure})"))
    yield page
    with open(ARTIFACTS / "browser_console.log", "a") as log:
        log.writelines(f"{line}\n" for line in page.kf_log)
    context.close()
