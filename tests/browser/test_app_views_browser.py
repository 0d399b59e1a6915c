"""What a user reads on the run view, its chart and the Benchmark page, in a real browser over seeded runs
(issue 23): values, labels and colours, not just that something is drawn.

The runs are written through the real store API (tests/browser/seed.py); the page only reads the store. The
Resume test starts a real worker (the view must follow it without a reload) and stops it again."""

from __future__ import annotations

import re
import time

import pytest

from kforge_core.bench.report import write_reports
from kforge_core.store import open_store
from tests.browser.appkit import stop_run
from tests.browser.conftest import ARTIFACTS, AppServer
from tests.browser.seed import (JUDGE_FLAG, PROBLEM, add_correct_iteration, bench_records, head_to_head_data,
                                seed_failed_run, seed_hostile_text_run, seed_mixed_run, seed_single_iteration_run, PROGRAM_V0,
                                PROGRAM_V1)
from tests.browser.test_app_browser import TIMELINE, no_traceback, paste_module

pytestmark = pytest.mark.browser

GREEN, RED, GREY = "rgb(47, 158, 68)", "rgb(224, 49, 49)", "rgb(134, 142, 150)"
CHART = "[data-testid=stPlotlyChart]"


@pytest.fixture(scope="module")
def seeded(app_server):
    with open_store(app_server.db) as s:
        return {"mixed": seed_mixed_run(s), "single": seed_single_iteration_run(s), "failed": seed_failed_run(s)}


def open_run(page, server, run_id: str) -> None:
    page.goto(f"{server.url}/?run={run_id}")
    page.get_by_text(run_id).first.wait_for()
    page.locator(f"{CHART} .main-svg").first.wait_for()


def legend(page) -> list[str]:
    return [t.strip() for t in page.locator(f"{CHART} .legendtext").all_text_contents()]


def bar_fills(page) -> list[str]:
    """Fill colours of the speedup bars, left to right."""
    return page.locator(f"{CHART} .barlayer .point path").evaluate_all(
        "els => els.map(e => getComputedStyle(e).fill)")


def test_finished_run_opens_on_its_best_with_honest_chart(page, app_server, seeded):
    open_run(page, app_server, seeded["mixed"])
    # opens on the best iteration (#2), not on the last one, which has no program
    page.get_by_text("Iteration #2").wait_for()
    selected = page.locator(f"{TIMELINE}[kind=primary], {TIMELINE}[data-testid=stBaseButton-primary]")
    assert selected.count() == 1 and selected.first.inner_text().startswith("O2")
    body = page.inner_text("body")
    assert "No program yet." not in body
    assert re.search(r"Iterations\s*5 / 9", body), body[:1500]  # 5 + 4 from the settings, stable
    assert "Stopped:" not in body or "nothing left to try" in body
    names = legend(page)
    # the newest baseline values are readable in the legend; iterations without a program are not "failed"
    assert "eager PyTorch (now 4.8 ms)" in names and "torch.compile (now 3 ms)" in names, names
    assert "no program" in names and "failed" not in names, names
    # speedup bars: 0.50x, 2.10x, 2.56x, 0.24x -> red, green, green, red, each labelled with its value
    assert bar_fills(page) == [RED, GREEN, GREEN, RED]
    labels = page.locator(f"{CHART} .barlayer .bartext").all_text_contents()
    assert labels == ["0.50×", "2.10×", "2.56×", "0.24×"], labels
    marker = page.locator(f"{CHART} .scatterlayer .trace .points path").evaluate_all(
        "els => els.map(e => getComputedStyle(e).stroke)")
    assert GREY in marker  # the no-program circle
    # the activity log cuts long reasons, and keeps the whole one a click away
    more = page.locator("details.kf-more").last
    more.locator("summary").click()
    assert "built with no change: fuse); nothing left to try" in more.inner_text()
    no_traceback(page)
    page.locator(CHART).first.screenshot(path=str(ARTIFACTS / "browser_chart_mixed.png"))


def test_result_and_profile_tabs_say_what_was_measured(page, app_server, seeded):
    open_run(page, app_server, seeded["mixed"])
    page.get_by_text("Iteration #2").wait_for()
    page.get_by_role("tab", name="Result").click()
    page.get_by_text(re.compile("Kernel launches per forward")).wait_for()
    body = page.inner_text("body")
    assert "Kernel launches per forward: swish_bias × 1 (counted over 6 checked calls)" in body, body[-3000:]
    page.get_by_role("tab", name="Profile").click()
    page.get_by_text(re.compile("no matrix product or convolution")).wait_for()
    body = page.inner_text("body")
    assert "0 FLOPs" not in body and "unknown stays unknown" not in body
    grid = page.locator("[data-testid=stDataFrame]").first
    grid.wait_for()
    # the grid draws on a canvas; its accessible table (what a screen reader reads) holds the cell texts
    grid.locator("[role=gridcell]").filter(has_text="swish_bias").first.wait_for(state="attached")
    cells = grid.locator("[role=gridcell]").all_text_contents()
    assert "mul+sigmoid+add (swish_bias)" in cells and "kforge::swish_bias" not in cells, cells
    no_traceback(page)


def test_single_iteration_run_draws_both_baselines_and_says_slower(page, app_server, seeded):
    open_run(page, app_server, seeded["single"])
    body = page.inner_text("body")
    assert "correct, but slower than eager" in body
    names = legend(page)
    assert "eager PyTorch (now 4 ms)" in names and "torch.compile (now 2.5 ms)" in names, names
    # each baseline is a visible level across the plot, not a zero-length line
    widths = page.locator(f"{CHART} .scatterlayer .trace .js-line").evaluate_all(
        "els => els.map(e => e.getBBox().width)")
    assert len(widths) >= 3 and sorted(widths)[-2] > 100, widths
    assert bar_fills(page) == [RED]
    # the time axis is logarithmic here: every tick says its own value (not "5" for 0.5 and 50 alike)
    ticks = [t.replace("\u2009", "")
             for t in page.locator(f"{CHART} .yaxislayer-above .ytick text").all_text_contents()]
    times = [float(t) for t in ticks if not t.endswith("×") and t]
    assert {5.0, 10.0, 20.0, 50.0} <= set(times) and len(set(times)) == len(times), ticks
    no_traceback(page)


def test_head_to_head_reads_each_contenders_spread_checks_and_warnings(page, app_server):
    """Issue 22 item 5: the run's head-to-head in the activity log (a narrow column), as a user reads it: a row per
    contender and baseline with its median, min, max and trials, each contender's checks and warnings under the
    table, the judging and the noise bounds, the contest's own warning; and, since the best's numbers come from
    that contest and its timing was noisy, a warning under the run's title naming it."""
    with open_store(app_server.db) as s:
        run_id = seed_single_iteration_run(s, problem_name="head_to_head_run")
        s.append_event(run_id, "head_to_head", head_to_head_data(best=0, other=1))
    open_run(page, app_server, run_id)
    table = page.locator("table.kf-contest")
    table.wait_for()
    rows = table.locator("tbody tr").evaluate_all("rs => rs.map(r => [...r.cells].map(c => c.innerText.trim()))")
    assert rows == [["#0 (best) — noisy", "1.25 ms", "0.9 ms", "1.3 ms", "7", "3.20x", "2.00x"],
                    ["#1", "2.5 ms", "2.4 ms", "2.6 ms", "7", "1.60x", "1.00x"],
                    ["eager", "4 ms", "3.9 ms", "4.1 ms", "7", "", ""],
                    ["torch.compile", "2.5 ms", "2.45 ms", "2.6 ms", "7", "", ""]], rows
    notes = page.locator("ul.kf-contest-notes li").all_inner_texts()
    assert notes[0].startswith("#0 checks: timed outputs match eager ✓, judge's clock ✓\nwarnings: noisy timing"), notes
    assert notes[1] == f"#1 checks: timed outputs match eager ✓, judge's clock ✓\nwarnings: {JUDGE_FLAG}", notes
    body = page.inner_text("body")
    assert "Judged out of process: each contender ran in a process of its own" in body
    assert "re-timed: the first was noisy (#0)" in body
    # the stylesheet reaches the table: compact, and no row wraps inside the narrow column
    assert table.evaluate("t => getComputedStyle(t).fontSize") == "12px"
    assert table.evaluate("t => [...t.rows].every(r => r.getBoundingClientRect().height < 30)")
    # the best's numbers came from that noisy contest: said under the run's title, in a warning's colours
    alert = page.locator("[data-testid=stAlert]").filter(has_text="noise bounds")
    assert alert.count() == 1
    assert alert.locator("[data-testid=stMarkdownContainer]").inner_text() == (
        "The best's speedups were measured beyond the noise bounds (the machine was busy or the timing unstable); "
        "re-time before trusting them: noisy timing (#0, median 1.25 ms is 1.4x its fastest trial (0.9 ms; bound "
        "1.3x) over 7 trials): the machine was busy or the timing unstable; re-time before trusting this number")
    assert alert.locator("[data-testid=stAlertContentWarning]").count() == 1  # a warning, not an error or a note
    assert alert.locator("[data-testid=stAlertContainer]").evaluate(
        "e => getComputedStyle(e).backgroundColor") == "rgb(255, 250, 229)"  # Streamlit's warning yellow
    no_traceback(page)
    page.locator("table.kf-contest").screenshot(path=str(ARTIFACTS / "browser_head_to_head.png"))


def test_all_failed_run_says_so_and_offers_no_pointless_resume(page, app_server, seeded):
    open_run(page, app_server, seeded["failed"])
    note = page.locator(f"{CHART} .annotation-text").all_text_contents()
    assert "No correct program: 2 of 2 iterations judged, none correct" in note, note
    assert "failed" in legend(page)
    # the two identical build failures read once in the activity log
    body = page.inner_text("body")
    assert re.search(r"#0–#1\s[^\n]*build failed[^\n]*\(×2\)", body), body[:3000]
    # the built-in synthesizer failed deterministically: Resume could change nothing, so it is not offered
    assert page.get_by_role("button", name="Resume").count() == 0
    no_traceback(page)


def test_resume_reattaches_the_open_view(page, app_server):
    with open_store(app_server.db) as s:
        run_id = s.create_run("resume_me", PROBLEM, "cpu", agent="builtin", config={
            "problem_name": "resume_me", "target": "cpu", "agent": "builtin", "max_functional_iters": 2,
            "max_optimization_iters": 2, "problem_source": PROBLEM, "eval_baselines": False})
        s.start_run(run_id)
        s.append_event(run_id, "pass_started", {"pass": "functional", "max_iterations": 2})
        add_correct_iteration(s, run_id, 0, "functional", PROGRAM_V1, PROGRAM_V0, ms=2.0)
        s.set_best(run_id, 0, speedup_vs_eager=2.0, speedup_vs_compiled=1.25, candidate_ms=2.0)
        s.finish_run(run_id, "cancelled", error="cancelled")
    open_run(page, app_server, run_id)
    time.sleep(1)  # let the first script run land: a click on an element being replaced is lost
    try:
        page.get_by_role("button", name="Resume").click()
        # no reload: the same page follows the resumed run (queued while the worker starts, then running)
        page.locator("h3").filter(has_text=re.compile(r"\b(queued|running)\b")).wait_for(timeout=60_000)
        page.get_by_role("button", name=re.compile("Cancel run|Cancelling")).wait_for(timeout=120_000)
        page.locator("h3").filter(has_text=re.compile(r"\brunning\b")).wait_for(timeout=60_000)
        assert page.get_by_role("button", name="Resume").count() == 0
        with open_store(app_server.db) as s:
            assert s.get_run(run_id)["status"] in ("running", "succeeded", "failed")
        no_traceback(page)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "browser_resume_failed.png"), full_page=True)
        log = app_server.db.parent / "worker-logs" / f"{run_id}.log"
        print(log.read_text()[-3000:] if log.exists() else "no worker log")
        raise
    finally:
        stop_run(run_id, app_server.db)


@pytest.fixture(scope="module")
def bench_server(tmp_path_factory, browser):
    tmp = tmp_path_factory.mktemp("bench")
    write_reports(tmp / "out", bench_records(), {"suite": "gallery", "target": "cpu", "agent": "builtin"})
    server = AppServer(tmp / "runs.db", env={"KFORGE_BENCH_DIR": str(tmp / "out")},
                       log=ARTIFACTS / "streamlit_bench.log").start()
    yield server
    server.stop()


def test_benchmark_chart_reads_slowdowns_as_slowdowns(browser, bench_server):
    page = browser.new_page(viewport={"width": 1440, "height": 1800})
    page.set_default_timeout(60_000)
    page.goto(f"{bench_server.url}/benchmark")
    page.get_by_role("heading", name="Benchmark").wait_for()
    chart = page.locator(CHART).nth(1)
    chart.locator(".barlayer .point path").first.wait_for()
    time.sleep(1)
    ticks = chart.locator(".ytick text").all_text_contents()
    assert {"0.3×", "0.5×", "1×", "2×"} <= set(ticks), ticks  # decimals, with their unit
    one = chart.locator(".ytick text").filter(has_text=re.compile(r"^1×$")).bounding_box()
    line_y = one["y"] + one["height"] / 2
    # 04_sigmoid: 0.31x vs eager hangs below 1x; 01_relu: 2.5x rises above it (both bars start at the 1x line)
    boxes = chart.locator(".barlayer .point path").evaluate_all(
        "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom]; })")
    texts = chart.locator(".barlayer .bartext").all_text_contents()
    by_text = dict(zip(texts, boxes))
    top, bottom = by_text["0.31×"]
    assert abs(top - line_y) < 4 and bottom > line_y + 20, (top, bottom, line_y)
    top, bottom = by_text["2.50×"]
    assert abs(bottom - line_y) < 4 and top < line_y - 20, (top, bottom, line_y)
    label = chart.locator(".annotation").filter(has_text="1× (no change)").bounding_box()
    assert abs((label["y"] + label["height"]) - line_y) < 8, (label, line_y)  # sits on its line
    assert "no correct program" in chart.locator(".scatterlayer .textpoint").all_text_contents()  # 18_conv2d
    body = page.inner_text("body")
    assert "↑" not in body.split("Correct")[1][:40]  # no "+100 %" delta on a count
    page.screenshot(path=str(ARTIFACTS / "browser_benchmark.png"), full_page=True)
    page.close()


CRASHING = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.view(3, -1)


def get_inputs():
    return [torch.randn(4, 5)]


def get_init_inputs():
    return []
'''
FLIP = CRASHING.replace("x.view(3, -1)", "torch.flip(x, dims=[1])")


def start_is_disabled(page) -> None:
    from playwright.sync_api import expect  # here: without playwright the browser fixtures skip these tests

    expect(page.get_by_role("button", name=re.compile("Start synthesis"))).to_be_disabled()


def _check(page, server, source: str) -> None:
    paste_module(page, server.url, source)
    time.sleep(1)
    page.get_by_role("button", name=re.compile("Check by running the reference")).click()


def test_failed_reference_check_disables_start(page, app_server):
    _check(page, app_server, CRASHING)
    page.get_by_text("Running the reference failed").wait_for(timeout=180_000)
    page.get_by_text(re.compile("the form needs .*a reference that runs")).wait_for()
    start_is_disabled(page)
    no_traceback(page)


def test_what_the_builtin_cannot_write_is_said_before_start(page, app_server):
    _check(page, app_server, FLIP)
    page.get_by_text("The built-in synthesizer cannot write this module").wait_for(timeout=240_000)
    alert = page.locator("[data-testid=stAlert]").filter(has_text="cannot write this module").inner_text()
    assert "flip" in alert, alert
    start_is_disabled(page)
    no_traceback(page)


def test_compare_reads_older_to_newer_side_by_side(page, app_server, seeded):
    run_id = seeded["mixed"]
    # A is the newer program (the best, #2), B the older (#1): the diff still reads #1 -> #2
    page.goto(f"{app_server.url}/compare?a={run_id}:2&b={run_id}:1")
    tab = page.get_by_role("tab", name=re.compile(r"Side-by-side diff \(B → A\)"))
    tab.wait_for()
    table = page.locator("table.diff")
    table.wait_for()
    added = table.locator(".diff_add")
    assert added.count() >= 1
    assert "kforge-builtin" in " ".join(added.all_text_contents())  # the line #2 added reads as an addition
    assert added.first.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(211, 249, 216)"
    no_traceback(page)


def test_hostile_text_in_a_run_is_shown_as_text(page, app_server):
    """A run whose candidate errors, model recommendations, endpoint error and profile carry markup (an <img> with
    a script handler, a remote image, a link, a colour directive): on every tab of both iterations the words are
    read as text (a URL too: not made a link), no such element is in the page, nothing ran, and nothing was
    fetched from the remote host."""
    with open_store(app_server.db) as s:
        run_id = seed_hostile_text_run(s)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{app_server.url}/?run={run_id}")
    page.get_by_text(run_id).first.wait_for()
    page.locator(TIMELINE).first.wait_for()
    assert page.locator(TIMELINE).count() == 2
    shown = []
    for index in range(2):
        page.locator(TIMELINE).nth(index).click()
        page.get_by_text(f"Iteration #{index}").first.wait_for()
        for tab in ("Result", "Profile", "Analysis"):
            page.get_by_role("tab", name=tab).click()
            page.wait_for_timeout(500)
            no_traceback(page)
            shown.append(page.inner_text("body").replace("\u2060", ""))  # the word joiners that stop autolinks
            hostile = page.evaluate("""() => ({
                imgs: [...document.images].filter(i => i.getAttribute('src') === 'x' || i.src.includes('evil.example')
                                                      || i.hasAttribute('onerror')).length,
                links: [...document.querySelectorAll('a')].filter(a => a.href.includes('evil.example')).length})""")
            assert hostile == {"imgs": 0, "links": 0}, (index, tab, hostile)
    text = "\n".join(shown)
    assert "<img src=x onerror=alert(1)>" in text and ":red[FORGED]" in text, text[-3000:]
    assert "![pixel](http://evil.example/p.png)" in text
    assert dialogs == [] and not page.kf_external, (dialogs, page.kf_external)
    assert not page.kf_errors, page.kf_errors
