"""Screenshots of the app's run view, run chart and Benchmark page over seeded runs (no loop, no GPU), for before /
after comparisons of UI changes. Usage:

    python scripts/app_screenshots.py OUT_DIR [--prefix after_] [--app-root DIR]

`--app-root` serves the app from another checkout (e.g. an export of main) over the same seeded store, so the two
sets of pictures show the same data. Needs Playwright's Python package and Debian's chromium.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kforge_core import tempdirs  # noqa: E402
from kforge_core.bench.report import write_reports  # noqa: E402
from kforge_core.store import open_store  # noqa: E402
from tests.browser import conftest as browser_kit  # noqa: E402
from tests.browser.seed import (bench_records, seed_failed_run, seed_mixed_run,  # noqa: E402
                                seed_single_iteration_run)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--app-root", type=Path, default=REPO)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = tempdirs.make("shots-")
    db = tmp / "runs.db"
    with open_store(db) as s:
        runs = {"mixed": seed_mixed_run(s), "single": seed_single_iteration_run(s), "failed": seed_failed_run(s)}
    bench_dir = tmp / "bench"
    write_reports(bench_dir, bench_records(), {"suite": "gallery", "target": "cpu", "agent": "builtin"})
    browser_kit.REPO = args.app_root
    server = browser_kit.AppServer(db, env={"KFORGE_BENCH_DIR": str(bench_dir)}, log=tmp / "streamlit.log")
    server.start()
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as p:
            browser = browser_kit.launch_chromium(p)
            page = browser.new_page(viewport={"width": 1440, "height": 1500})
            page.set_default_timeout(90_000)
            for name, run_id in runs.items():
                page.goto(f"{server.url}/?run={run_id}")
                page.get_by_text(run_id).first.wait_for()
                page.locator("[data-testid=stPlotlyChart], [data-testid=stAlert]").first.wait_for()
                time.sleep(3)
                page.screenshot(path=str(args.out / f"{args.prefix}run_view_{name}.png"), full_page=True)
                chart = page.locator("[data-testid=stPlotlyChart]")
                if chart.count():
                    chart.first.screenshot(path=str(args.out / f"{args.prefix}run_chart_{name}.png"))
            page.goto(f"{server.url}/benchmark")
            page.get_by_role("heading", name="Benchmark").wait_for()
            page.locator("[data-testid=stPlotlyChart]").nth(1).wait_for()
            time.sleep(3)
            page.screenshot(path=str(args.out / f"{args.prefix}benchmark.png"), full_page=True)
            page.locator("[data-testid=stPlotlyChart]").nth(1).screenshot(
                path=str(args.out / f"{args.prefix}benchmark_speedups.png"))
            browser.close()
    finally:
        server.stop()
    for f in sorted(args.out.glob(f"{args.prefix}*.png")):
        print(f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
