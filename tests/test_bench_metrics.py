"""Benchmark figures and suite resolution (no synthesis: records are made by hand)."""

import json
import math
from pathlib import Path

import pytest

from kforge_core.bench.metrics import fast_p, geomean, summarize
from kforge_core.bench.report import write_reports
from kforge_core.bench.suite import resolve_suite
from kforge_core.errors import UsageError

RECORDS = [
    {"problem": "a", "level": 1, "status": "succeeded", "correct": True, "speedup_vs_eager": 2.0,
     "speedup_vs_compiled": 1.1},
    {"problem": "b", "level": 1, "status": "succeeded", "correct": True, "speedup_vs_eager": 0.5,
     "speedup_vs_compiled": 0.4},
    {"problem": "c", "level": 2, "status": "failed", "correct": False, "speedup_vs_eager": None},
    {"problem": "d", "level": 2, "status": "succeeded", "correct": True, "speedup_vs_eager": 1.3,
     "speedup_vs_compiled": None},
]


def test_fast_p_counts_correct_and_faster_over_all_problems():
    assert fast_p(RECORDS, 0.0, "eager") == 0.75  # fast_0 is the correctness rate
    assert fast_p(RECORDS, 1.0, "eager") == 0.5  # a (2.0) and d (1.3)
    assert fast_p(RECORDS, 1.5, "eager") == 0.25
    assert fast_p(RECORDS, 2.0, "eager") == 0.0  # strictly faster than p
    assert fast_p(RECORDS, 1.0, "compiled") == 0.25  # d has no compiled timing: not counted as faster
    assert fast_p([], 1.0, "eager") is None


def test_geomean_both_ways_labelled():
    s = summarize(RECORDS)
    assert math.isclose(s["geomean_speedup_vs_eager_failures_as_1"], (2.0 * 0.5 * 1.0 * 1.3) ** 0.25)
    assert math.isclose(s["geomean_speedup_vs_eager_correct_only"], (2.0 * 0.5 * 1.3) ** (1 / 3))
    assert s["median_speedup_vs_eager_correct_only"] == 1.3
    assert s["per_level"]["1"]["correct"] == 2 and s["per_level"]["2"]["problems"] == 2
    assert geomean([]) is None


def test_reports_written(tmp_path):
    summary = write_reports(tmp_path, RECORDS, {"target": "cpu"})
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["summary"]["correct"] == 3 == summary["correct"]
    assert [r["problem"] for r in data["problems"]] == ["a", "b", "c", "d"]
    assert (tmp_path / "results.csv").read_text().splitlines()[0].startswith("problem,level,status,correct")
    page = (tmp_path / "report.html").read_text()
    assert "fast_1" in page and "plotly" in page.lower() and "failures counted as 1.0" in page


def _kernelbench_tree(root: Path) -> Path:
    src = Path("platforms/examples/cpu/problem.py").read_text()
    for level, names in ((1, ["1_Swish.py", "2_Other.py"]), (2, ["10_Fused.py"])):
        d = root / f"level{level}"
        d.mkdir(parents=True)
        for n in names:
            (d / n).write_text(src)
    return root


def test_kernelbench_layout_and_level_filter(tmp_path):
    root = _kernelbench_tree(tmp_path / "KernelBench")
    problems = resolve_suite(str(root))
    assert [p.name for p in problems] == ["level1/1_Swish", "level1/2_Other", "level2/10_Fused"]
    assert [p.level for p in problems] == [1, 1, 2]
    assert [p.name for p in resolve_suite(str(root), level=2)] == ["level2/10_Fused"]


def test_list_file_and_errors(tmp_path):
    root = _kernelbench_tree(tmp_path / "kb")
    listing = tmp_path / "suite.txt"
    listing.write_text("# my suite\nkb/level1/1_Swish.py\n")
    assert [p.name for p in resolve_suite(str(listing))] == ["1_Swish"]
    with pytest.raises(UsageError):
        resolve_suite(str(root), level=7)
    with pytest.raises(UsageError):
        resolve_suite("no-such-suite-or-problem")


def test_gallery_suite_resolves():
    problems = resolve_suite("gallery")
    assert len(problems) >= 30
    assert {p.level for p in problems} == {1, 2, 3}
    assert all(p.path.exists() for p in problems)
