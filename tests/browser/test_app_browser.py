"""The app in a real browser: paste a module, start a run on the CPU target with the built-in synthesizer (no GPU,
no API key), watch iterations, a diff and the chart appear live, then open the run again from the Runs page.

The run is real: a detached worker process runs the loop and the evaluator; the page only polls the store.
Screenshots land in test-artifacts/ (look at them: they are how this UI was checked).
"""

from __future__ import annotations

import re
import time

import pytest

from kforge_core.store import open_store
from tests.browser.appkit import stop_run
from tests.browser.conftest import ARTIFACTS
from tests.browser.scripted import PROBLEM

pytestmark = pytest.mark.browser

ITERATIONS_TIMEOUT_MS = 240_000  # two evaluations with baselines on 2 busy cores; usually ~60 s
TIMELINE = "[class*=st-key-kf-timeline] button"  # the iteration buttons


def no_traceback(page) -> None:
    text = page.inner_text("body")
    assert "Traceback (most recent call last)" not in text, text[-2000:]
    assert page.locator("[data-testid=stException]").count() == 0
    assert not page.kf_errors, page.kf_errors  # script errors in the browser (they can blank the page)
    assert not page.kf_external, page.kf_external  # nothing fetched from the internet


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_bad_module_is_reported_in_place(page, app_server):
    page.goto(app_server.url)
    page.get_by_text("Synthesize a kernel").wait_for()
    area = page.locator("textarea").first
    area.fill("import torch\n\nclass Model:\n    def forward(self, x)\n        return x\n")
    area.press("Control+Enter")
    page.get_by_text("This module cannot be used").wait_for()
    assert "line 4" in page.inner_text("[data-testid=stAlert]")
    no_traceback(page)
    shot(page, "browser_bad_module.png")


def paste_module(page, url: str, source: str) -> None:
    """Open the Synthesize form, paste `source` and wait until it is accepted and the targets are discovered."""
    page.goto(url)
    page.get_by_text("Synthesize a kernel").wait_for()
    area = page.locator("textarea").first
    area.fill(source)
    area.press("Control+Enter")
    page.get_by_text("Model, get_inputs and get_init_inputs found").wait_for()
    page.get_by_text("CPU (C++ / OpenMP)").first.wait_for()  # targets discovered (in a child process)


def test_synthesize_live_then_reopen_from_runs(page, app_server):
    started = time.monotonic()
    paste_module(page, app_server.url, PROBLEM)
    assert page.get_by_role("radio", name=re.compile("Built-in synthesizer")).is_checked()
    for label, value in (("Functional iterations", "2"), ("Optimization iterations", "1")):
        box = page.get_by_label(label, exact=True)
        box.fill(value)
        box.press("Enter")
    time.sleep(1)  # let the last rerun land before pressing Start
    shot(page, "browser_form.png")
    page.get_by_role("button", name=re.compile("Start synthesis")).click()
    page.wait_for_url(re.compile(r"[?&]run=[0-9a-f]+"), timeout=120_000)
    run_id = re.search(r"run=([0-9a-f]+)", page.url).group(1)
    try:
        # live: iterations appear one by one, with the chart
        page.locator(TIMELINE).nth(0).wait_for(timeout=ITERATIONS_TIMEOUT_MS)
        # the chart appears with the first verdict
        page.locator("[data-testid=stPlotlyChart]").first.wait_for(timeout=ITERATIONS_TIMEOUT_MS)
        shot(page, "browser_live_first_iteration.png")
        page.locator(TIMELINE).nth(1).wait_for(timeout=ITERATIONS_TIMEOUT_MS)
        no_traceback(page)
        # the second iteration's diff against the first
        page.locator(TIMELINE).nth(1).click()
        page.get_by_role("tab", name="Diff").click()
        page.get_by_text(re.compile(r"Changes against iteration #0")).wait_for()
        page.locator(".kf-code .gd, .kf-code .gi").first.wait_for()  # pygments diff lines (drawn after the title)
        shot(page, "browser_live_diff.png")
        page.get_by_role("tab", name="Program").click()
        page.get_by_text("Kernel source").first.wait_for()
        shot(page, "browser_live_program.png")
        # the run keeps going in its worker; open it again from the Runs page
        page.get_by_role("link", name="Runs").first.click()
        page.get_by_role("heading", name="Runs").wait_for()
        page.get_by_text(run_id).wait_for()
        row = page.locator("[data-testid=stHorizontalBlock]").filter(has_text=run_id)
        shot(page, "browser_runs.png")
        row.get_by_role("link", name=re.compile("Open")).click()
        page.wait_for_url(re.compile(rf"run={run_id}"))
        page.get_by_text(re.compile(r"Iteration #\d")).first.wait_for()
        assert page.locator(TIMELINE).count() >= 2
        page.locator("[data-testid=stPlotlyChart]").first.wait_for()
        no_traceback(page)
        shot(page, "browser_reopened.png")
    finally:
        stop_run(run_id, app_server.db)
    with open_store(app_server.db) as s:
        assert len(s.iterations(run_id)) >= 2
    print(f"browser end-to-end: {time.monotonic() - started:.0f} s")
