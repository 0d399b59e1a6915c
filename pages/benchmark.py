"""Benchmark: the report of a `python -m kforge_core bench` run — correctness, fast_p against eager and
torch.compile, geometric means (labelled), per level, per problem — with the same charts as report.html."""

from __future__ import annotations

import json
import os
from pathlib import Path

import streamlit as st

from app.cluster import bench_notes
from app.formatting import fmt_ms, fmt_x
from app.navigation import run_url
from kforge_core.bench.charts import fast_p_figure, speedup_figure
from kforge_core.bench.metrics import P_VALUES, counts_text, outcome_of, partial_text, slower_than

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

def _gallery_counts() -> dict[str, int]:
    levels = sorted(p for p in (ROOT / "assets" / "problems").glob("level*") if p.is_dir())
    counts = {f"gallery:{p.name}": len(list(p.glob("*.py"))) for p in levels}
    return {"gallery": sum(counts.values()), **counts}


def _bench_command_box(wall_per_problem_s: float | None, best_of_then: int = 1) -> None:
    """A benchmark starts from the command line (it runs for minutes to hours, detached from any page): the command
    for the chosen suite and best-of-k, ready to copy, with a rough time from the results open below when there are
    some (run with `best_of_then` candidates a step)."""
    with st.expander("Run a benchmark", icon=":material/terminal:"):
        counts = _gallery_counts()
        c1, c2 = st.columns([3, 1])
        suite = c1.selectbox("Suite", list(counts), index=1 if len(counts) > 1 else 0, key="kf-bench-suite",
                             format_func=lambda k: f"{k} ({counts[k]} problems)")
        best_of = int(c2.number_input("Best of k", 1, 16, 1, key="kf-bench-best-of",
                                      help="candidates per step, the best one kept (`--best-of K`): about k times "
                                           "the evaluations; on a Ray cluster the k are evaluated at once"))
        st.code(bench_command(suite, best_of), language="bash")
        if wall_per_problem_s:
            minutes = counts[suite] * wall_per_problem_s * best_of / max(1, best_of_then) / 60
            st.caption(f"About {minutes:.0f} min at the {wall_per_problem_s:.0f} s per problem of the results open "
                       f"below (best of {best_of_then}"
                       + (f", scaled to best of {best_of}" if best_of != best_of_then else "")
                       + "). Re-running the same command resumes; open the folder here when it is done.")
        else:
            st.caption("Each problem runs the full loop (several evaluations, k candidates a step): minutes per "
                       "problem on a 2-core CPU. Re-running the same command resumes; open the folder here when it "
                       "is done.")


def bench_command(suite: str, best_of: int) -> str:
    out = f"bench/out/{suite.replace(':', '_')}" + (f"_best{best_of}" if best_of > 1 else "")
    best = f" --best-of {best_of}" if best_of > 1 else ""
    return f"python -m kforge_core bench --suite {suite} --target cpu --agent builtin{best} --out {out}"


options = _candidates()
typed = st.text_input("Results folder (holding results.json)", value=options[0] if options else "",
                      key="kf-bench-dir", placeholder="bench/out")
if options:
    st.caption("Found: " + ", ".join(f"`{o}`" for o in options))
if not typed.strip():
    _bench_command_box(None)
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

walls = sorted(r["wall_s"] for r in records if isinstance(r.get("wall_s"), (int, float)))
_bench_command_box(walls[len(walls) // 2] if walls else None, int(meta.get("best_of_k") or 1))
st.markdown(" · ".join(f"**{k}**: {v}" for k, v in meta.items() if v not in (None, "")))
if partial_text(summary):
    st.warning(partial_text(summary), icon=":material/timelapse:")
c1, c2, c3, c4 = st.columns(4)
c1.metric("Correct", f"{summary['correct']}/{summary['problems']}",
          help=f"{_pct(summary['correctness_rate'])} of the problems have a correct program")
c1.caption(counts_text(summary) if "supported" in summary else "")
c2.metric("fast_1 vs eager", _pct(summary["fast_p_vs_eager"]["1"]))
c3.metric("fast_1 vs torch.compile", _pct(summary["fast_p_vs_compiled"]["1"]))
c4.metric("Geomean vs eager (failures = 1.0×)", fmt_x(summary["geomean_speedup_vs_eager_failures_as_1"]))
slow = slower_than(records, "eager")  # from the records: results written before the count existed have them too
if slow:
    st.warning(f"{slow} of the {summary['correct']} correct problems are **slower than eager PyTorch**: correct, but "
               "no kernel beats eager there (their measured speedups, below 1×, are counted as they are).",
               icon=":material/slow_motion_video:")
noisy = sum(1 for r in records if r.get("correct") and r.get("noise"))
if noisy:
    st.warning(f"{noisy} of the {summary['correct']} correct problems have speedups **measured beyond the noise "
               "bounds** (the machine was busy or the timing unstable): see their `noise` column and re-time "
               "before trusting those numbers.", icon=":material/graphic_eq:")
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

def _part_rows(label: str, parts: dict) -> list[dict]:
    return [{label: name, "correct": f"{s['correct']}/{s['problems']}", "failed": s.get("failed"),
             "unsupported": s.get("unsupported"), "error": s.get("error"),
             "fast_1 vs eager": _pct(s["fast_1_vs_eager"]), "fast_1 vs torch.compile": _pct(s["fast_1_vs_compiled"]),
             "geomean vs the better baseline (correct only)": fmt_x(
                 s.get("geomean_speedup_vs_best_baseline_correct_only"))} for name, s in parts.items()]


for title, label, key in (("Per level", "level", "per_level"), ("Per problem kind", "kind", "per_kind")):
    if summary.get(key):
        st.subheader(title)
        st.dataframe(_part_rows(label, summary[key]), hide_index=True, width="stretch")

st.plotly_chart(fast_p_figure(records), width="stretch")
st.plotly_chart(speedup_figure(records), width="stretch")
st.subheader("Problems")
st.caption("In the order they ran (stratified by kind). Last verdict and reason: why a problem is not correct; "
           "coverage: what the agent says it covers of the problem.")
st.dataframe([{"problem": r.get("problem"), "level": r.get("level"), "kind": r.get("kind") or "",
               "outcome": r.get("outcome") or outcome_of(r), "last verdict": r.get("last_status") or "",
               "reason": r.get("reason") or (r.get("error") or "")[:300], "coverage": r.get("coverage") or "",
               "candidate": fmt_ms(r.get("candidate_ms")), "eager": fmt_ms(r.get("eager_ms")),
               "torch.compile": fmt_ms(r.get("compiled_ms")), "vs eager": fmt_x(r.get("speedup_vs_eager")),
               "vs compile": fmt_x(r.get("speedup_vs_compiled")),
               "noise": "; ".join(r.get("noise") or []),
               "run": run_url(r["run_id"]) if r.get("run_id") else None,
               "node": r.get("node") or "", "device": r.get("device") or ""} for r in records],
             hide_index=True, width="stretch",
             column_config={"run": st.column_config.LinkColumn("run", display_text=r"run=([0-9a-f]+)",
                                                               help="open the run in the run view")})
