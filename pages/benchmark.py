"""Benchmark: the report of a `python -m kforge_core bench` run — correctness, fast_p against eager and
torch.compile, geometric means (labelled), per level, per problem — with the same charts as report.html."""

from __future__ import annotations

import json
import os
from pathlib import Path

import streamlit as st

from app.cluster import bench_notes
from app.formatting import fmt_ms, fmt_x
from kforge_core.bench.charts import fast_p_figure, speedup_figure
from kforge_core.bench.metrics import P_VALUES

ROOT = Path(__file__).resolve().parent.parent


def _candidates() -> list[str]:
    """Result folders worth offering: bench/out/* under the repo and the folder in KFORGE_BENCH_DIR."""
    found = [p.parent for p in (ROOT / "bench").glob("out*/**/results.json")]
    extra = os.environ.get("KFORGE_BENCH_DIR")
    if extra and (Path(extra) / "results.json").is_file():
        found.insert(0, Path(extra))
    return [str(p) for p in dict.fromkeys(found)]


def _pct(v) -> str:
    return "—" if v is None else f"{100 * v:.0f}%"


st.title("Benchmark")
st.caption("Results written by `python -m kforge_core bench --suite gallery --target cpu --out DIR` "
           "(any suite: the gallery, a level, a KernelBench checkout). fast_p is the share of all problems that "
           "are correct and more than p× faster than the baseline.")

options = _candidates()
typed = st.text_input("Results folder (holding results.json)", value=options[0] if options else "",
                      key="kf-bench-dir", placeholder="bench/out")
if options:
    st.caption("Found: " + ", ".join(f"`{o}`" for o in options))
if not typed.strip():
    st.info("No benchmark results yet. Run `python -m kforge_core bench --suite gallery --target cpu "
            "--agent builtin --out bench/out` and open `bench/out` here.", icon=":material/leaderboard:")
    st.stop()
path = Path(typed.strip()).expanduser()
results_file = path / "results.json" if path.is_dir() else path
try:
    data = json.loads(results_file.read_text())
    summary, records, meta = data["summary"], data["problems"], data.get("meta", {})
except FileNotFoundError:
    st.error(f"No results.json in `{path}`.", icon=":material/folder_off:")
    st.stop()
except (OSError, ValueError, KeyError, TypeError) as exc:
    st.error(f"`{results_file}` is not a KForge benchmark result: {exc}", icon=":material/error:")
    st.stop()

st.markdown(" · ".join(f"**{k}**: {v}" for k, v in meta.items() if v not in (None, "")))
c1, c2, c3, c4 = st.columns(4)
c1.metric("Correct", f"{summary['correct']}/{summary['problems']}", _pct(summary["correctness_rate"]),
          delta_color="off")
c2.metric("fast_1 vs eager", _pct(summary["fast_p_vs_eager"]["1"]))
c3.metric("fast_1 vs torch.compile", _pct(summary["fast_p_vs_compiled"]["1"]))
c4.metric("Geomean vs eager (failures = 1.0×)", fmt_x(summary["geomean_speedup_vs_eager_failures_as_1"]))
bench_notes(summary)

rows = []
for p in P_VALUES:
    rows.append({"": f"fast_{p:g}", "vs eager": _pct(summary["fast_p_vs_eager"][f"{p:g}"]),
                 "vs torch.compile": _pct(summary["fast_p_vs_compiled"][f"{p:g}"])})
for label, suffix in (("geometric mean, failures counted as 1.0×", "geomean_speedup_vs_{}_failures_as_1"),
                      ("geometric mean, correct problems only", "geomean_speedup_vs_{}_correct_only"),
                      ("median, correct problems only", "median_speedup_vs_{}_correct_only")):
    rows.append({"": label, "vs eager": fmt_x(summary[suffix.format("eager")]),
                 "vs torch.compile": fmt_x(summary[suffix.format("compiled")])})
st.dataframe(rows, hide_index=True, width="stretch")

if summary.get("per_level"):
    st.subheader("Per level")
    st.dataframe([{"level": lv, "correct": f"{s['correct']}/{s['problems']}",
                   "fast_1 vs eager": _pct(s["fast_1_vs_eager"]), "fast_1 vs torch.compile": _pct(
                       s["fast_1_vs_compiled"])} for lv, s in summary["per_level"].items()],
                 hide_index=True, width="stretch")

st.plotly_chart(fast_p_figure(records), width="stretch")
st.plotly_chart(speedup_figure(records), width="stretch")
st.subheader("Problems")
st.dataframe([{"problem": r.get("problem"), "level": r.get("level"), "status": r.get("status"),
               "candidate": fmt_ms(r.get("candidate_ms")), "eager": fmt_ms(r.get("eager_ms")),
               "torch.compile": fmt_ms(r.get("compiled_ms")), "vs eager": fmt_x(r.get("speedup_vs_eager")),
               "vs compile": fmt_x(r.get("speedup_vs_compiled")), "run": r.get("run_id") or "",
               "node": r.get("node") or "", "device": r.get("device") or "",
               "error": (r.get("error") or "")[:120]} for r in records], hide_index=True, width="stretch")
