"""Issue 23's last items, as a user reads them in a real browser: a built-in program's kernel first (its prelude
folded, the marker line inside the pane, no unused host helper), the gallery picker's coverage marks and the sizes
of the chosen target, best-of-k and the timing budget on the new-run form, the Benchmark page, a manual run's
author on Runs."""

from __future__ import annotations

import json
import re
import time

import pytest

from app import gallery_coverage
from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.bench.report import write_reports
from kforge_core.gallery import get_problem, list_problems
from kforge_core.store import open_store
from tests.browser.conftest import ARTIFACTS, AppServer
from tests.browser.seed import PROGRAM_V0, add_correct_iteration, bench_records
from tests.browser.test_app_browser import no_traceback

pytestmark = pytest.mark.browser

RELU = "level1/01_relu"


@pytest.fixture(scope="module")
def server(tmp_path_factory, browser):
    """An app over its own store, cache (the coverage answers) and benchmark results."""
    tmp = tmp_path_factory.mktemp("polish")
    cache = tmp / "cache"
    write_reports(tmp / "bench", bench_records(), {"suite": "gallery", "target": "cpu", "agent": "builtin"})
    server = AppServer(tmp / "runs.db", env={"KFORGE_CACHE_DIR": str(cache), "KFORGE_BENCH_DIR": str(tmp / "bench")},
                       log=ARTIFACTS / "streamlit_polish.log")
    server.cache = cache
    server.start()
    yield server
    server.stop()


def test_program_tab_shows_the_kernel_first_and_keeps_the_marker_in_the_pane(page, server):
    program = BuiltinGenerationAgent().synthesize(get_problem(RELU).source, "cpu", problem_name=RELU).program
    with open_store(server.db) as s:
        run_id = s.create_run("relu_program", get_problem(RELU).source, "cpu", agent="builtin")
        s.start_run(run_id)
        add_correct_iteration(s, run_id, 0, "functional", program, PROGRAM_V0, ms=1.0)
        s.set_best(run_id, 0, speedup_vs_eager=4.0, speedup_vs_compiled=2.5, candidate_ms=1.0)
        s.finish_run(run_id, "succeeded")
    page.goto(f"{server.url}/?run={run_id}")
    page.get_by_text("Whole program").wait_for()
    body = page.inner_text("body")
    assert body.index("Kernel source") < body.index("Whole program")
    blocks = page.locator(".kf-code")
    kernel = blocks.first.inner_text()
    # the kernel's own text opens the block: its label line and the function, not #include and math helpers
    assert re.match(r"\s*\d+\s*// relu: elementwise", kernel), kernel[:200]
    assert "extern \"C\" void kf_k0" in kernel and "#include" not in kernel and "kf_tanh" not in kernel
    prelude = page.locator("details.kf-prelude")
    summary = prelude.locator("summary").inner_text()
    assert re.match(r"Prelude of SOURCE: \d+ lines above the kernels \(includes and helpers\), program lines",
                    summary), summary
    assert not prelude.locator(".kf-code").is_visible()  # folded until asked for
    prelude.locator("summary").click()
    assert "#include <cmath>" in prelude.locator(".kf-code").inner_text()
    whole = page.locator(".kf-code").filter(has_text="class ModelNew").first
    text = whole.inner_text()
    assert "def kf_prep" in text and "def kf_meta" not in text and "KF_META" not in text  # only helpers it calls
    marker = whole.locator(".kf-marker")
    assert marker.count() == 1 and '"backend": "cpp-ctypes"' in marker.inner_text()
    pane, line = whole.bounding_box(), marker.bounding_box()
    assert line["x"] + line["width"] <= pane["x"] + pane["width"] + 1, (line, pane)  # wrapped, not cut off
    assert line["height"] > 1.5 * 0.8 * 16  # more than one line tall: it wrapped
    no_traceback(page)
    page.screenshot(path=str(ARTIFACTS / "browser_program_tab.png"), full_page=True)


def _store_answers(cache, level: int, covered: str | None = None) -> None:
    """The survey's answers for a level on the CPU target, as the coverage job writes them: `covered` worked out
    for real by the built-in agent, the others marked not covered so the server's own survey finds nothing to do."""
    import os

    os.environ["KFORGE_CACHE_DIR"] = str(cache)  # where gallery_coverage reads and writes, as the server does
    if covered:
        gallery_coverage.compute([get_problem(covered).source], "cpu")
    for p in list_problems(level):
        path = gallery_coverage._file(p.source, "cpu")
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"status": "none", "text": "not surveyed in this test"}))


def test_gallery_picker_marks_coverage_and_says_the_target_sizes(page, server, monkeypatch):
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(server.cache))
    _store_answers(server.cache, 1, RELU)
    _store_answers(server.cache, 2)
    page.goto(server.url)
    page.get_by_text("Synthesize a kernel").wait_for()
    page.get_by_text("Gallery", exact=True).click()
    page.get_by_text(re.compile(r"^Level 1 \(\d+\)$")).wait_for()
    caption = page.get_by_text(re.compile(r"^Built-in synthesizer on CPU")).inner_text()
    n = len(list_problems(1))
    assert caption.startswith("Built-in synthesizer on CPU (C++ / OpenMP): covered — 1 of 1 nodes (100%) "
                              "synthesized"), caption
    assert f"Level: 1 covered, 0 partly, {n - 1} not, of {n}." in caption, caption
    combo = page.get_by_role("combobox", name="Gallery problem")
    picked = combo.input_value()
    assert picked.startswith("✓ ReLU — "), picked
    sizes = page.get_by_text(re.compile(r"^Sizes on CPU")).inner_text()
    assert re.search(r"its CPU_SIZES\s*, \w+=\d+", sizes) and "GPU targets use the file's own sizes" in sizes, sizes
    combo.click()
    page.get_by_role("option").first.wait_for()
    options = page.get_by_role("option").all_inner_texts()
    assert len(options) == n, options
    assert options and all(o.startswith(("✓ ", "◐ ", "✗ ")) for o in options), options
    page.keyboard.press("Escape")
    # grouped by level: level 2's problems, its own tally
    page.get_by_text(re.compile(r"^Level 2 \(\d+\)$")).click()
    m = len(list_problems(2))
    page.get_by_text(re.compile(rf"Level: 0 covered, 0 partly, {m} not, of {m}\.")).wait_for()
    assert page.get_by_role("combobox", name="Gallery problem").input_value().startswith("✗ ")
    page.get_by_text(re.compile(r"^level2_\w+: Model, get_inputs")).wait_for()
    no_traceback(page)


def test_new_run_form_offers_best_of_k_in_its_budget(page, server):
    page.goto(server.url)
    page.get_by_text("Synthesize a kernel").wait_for()
    box = page.get_by_role("spinbutton", name="Best of k")
    box.fill("3")
    box.press("Enter")
    page.get_by_text(re.compile(r"× 3 programs a step")).wait_for()
    assert "At most 30 iterations (5 functional + 5 optimization steps × 3 programs a step)" in page.inner_text("body")
    no_traceback(page)


def test_new_run_form_leaves_the_timing_budget_to_the_target(page, server):
    """Evaluation settings: the timing budget starts empty, its placeholder saying the target's own applies (2 s,
    1 s on the CPU); the minimum trials field reads 10; a typed budget is kept as typed."""
    page.goto(server.url)
    page.get_by_text("Synthesize a kernel").wait_for()
    page.get_by_text("Evaluation settings").click()
    budget = page.get_by_role("spinbutton", name="Timing budget (s)")
    budget.wait_for()
    assert budget.input_value() == ""
    assert budget.get_attribute("placeholder") == "the target's own"
    assert page.get_by_role("spinbutton", name="Min timed trials").input_value() == "10"
    budget.fill("3.5")
    budget.press("Enter")
    page.wait_for_timeout(500)
    assert page.get_by_role("spinbutton", name="Timing budget (s)").input_value() == "3.50"
    no_traceback(page)


def test_benchmark_page_gives_a_best_of_k_command_with_its_time(page, server):
    page.goto(f"{server.url}/benchmark")
    page.get_by_role("heading", name="Benchmark").wait_for()
    page.get_by_text("Run a benchmark").click()
    code = page.locator("[data-testid=stCode]").first
    assert "--best-of" not in code.inner_text()
    box = page.get_by_role("spinbutton", name="Best of k")
    box.fill("4")
    box.press("Enter")
    page.get_by_text(re.compile(r"scaled to best of 4")).wait_for()
    text = page.locator("[data-testid=stCode]").first.inner_text()
    assert re.search(r"bench --suite gallery:level1 --target cpu --agent builtin --best-of 4 --out "
                     r"bench/out/gallery_level1_best4", text), text
    # 30 s per problem in the open results (best of 1), 18 level-1 problems, 4 candidates a step: 36 min
    assert "About 36 min at the 30 s per problem of the results open below (best of 1, scaled to best of 4)" in \
        page.inner_text("body")
    no_traceback(page)


def test_runs_page_names_a_manual_runs_author(page, server):
    with open_store(server.db) as s:
        s.create_run("hand_written_relu", get_problem(RELU).source, "cpu", agent="builtin", kind="manual",
                     author="ada")
    page.goto(f"{server.url}/runs")
    page.get_by_text("hand_written_relu").wait_for()
    time.sleep(0.5)
    assert "manual run, written by ada" in page.inner_text("body")
    no_traceback(page)
