"""Write benchmark results as results.json, results.csv and a self-contained report.html (plotly inlined)."""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path

from .charts import fast_p_figure, speedup_figure
from .metrics import P_VALUES, counts_text, mixed_devices_note, partial_text, summarize

CSV_FIELDS = ("problem", "level", "status", "correct", "outcome", "kind", "last_status", "reason", "coverage",
              "candidate_ms", "eager_ms", "compiled_ms", "speedup_vs_eager", "speedup_vs_compiled", "slower_than_eager",
              "slower_than_compiled", "noise", "custom_share", "below_custom_share", "iterations", "run_id", "node",
              "device", "wall_s", "error")


# What the bench's meta says about its completion, repeated in the summary (a partial result must read as one)
COMPLETION_KEYS = ("partial", "suite_problems", "not_run", "stopped_by")


def write_reports(out_dir: Path, records: list[dict], meta: dict) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {**summarize(records), **{k: meta[k] for k in COMPLETION_KEYS if k in meta}}
    (out_dir / "results.json").write_text(json.dumps({"meta": meta, "summary": summary, "problems": records},
                                                     indent=1, default=str))
    with open(out_dir / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**r, "noise": " | ".join(r.get("noise") or [])} for r in records)
    (out_dir / "report.html").write_text(render_html(records, summary, meta))
    return summary


def _fmt(v, pct: bool = False) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{100 * v:.0f}%" if pct else f"{v:.3g}"
    return html.escape(str(v))


def _cell(record: dict, key: str) -> str:
    """One table cell; a speedup below 1x is red and says it is a slowdown."""
    value = record.get(key)
    if key.startswith("speedup_vs_") and isinstance(value, (int, float)) and value < 1.0:
        return f"<td style='color:#c92a2a'>{_fmt(value)} (slower)</td>"
    return f"<td>{_fmt(value)}</td>"


def render_html(records: list[dict], summary: dict, meta: dict) -> str:
    fig_a = fast_p_figure(records).to_html(include_plotlyjs=True, full_html=False)
    fig_b = speedup_figure(records).to_html(include_plotlyjs=False, full_html=False)
    fast_rows = "".join(
        f"<tr><td>fast_{p:g}</td><td>{_fmt(summary['fast_p_vs_eager'][f'{p:g}'], True)}</td>"
        f"<td>{_fmt(summary['fast_p_vs_compiled'][f'{p:g}'], True)}</td></tr>" for p in P_VALUES)
    geo_rows = "".join(
        f"<tr><td>{label}</td><td>{_fmt(summary[f'{key}_vs_eager{suffix}'])}</td>"
        f"<td>{_fmt(summary[f'{key}_vs_compiled{suffix}'])}</td></tr>"
        for label, key, suffix in (("geometric mean, failures counted as 1.0×", "geomean_speedup", "_failures_as_1"),
                                   ("geometric mean, correct problems only", "geomean_speedup", "_correct_only"),
                                   ("median, correct problems only", "median_speedup", "_correct_only")))
    part_rows = "".join(_part_row(f"level {lv}", s) for lv, s in summary["per_level"].items()) + "".join(
        _part_row(html.escape(k), s) for k, s in summary.get("per_kind", {}).items())
    problem_rows = "".join(
        "<tr>" + "".join(_cell(r, k) for k in ("problem", "level", "kind", "outcome", "last_status", "candidate_ms",
                                               "eager_ms", "compiled_ms", "speedup_vs_eager", "speedup_vs_compiled",
                                               "custom_share", "iterations", "node", "device")) +
        f"<td>{html.escape(r.get('reason') or '')}</td><td>{html.escape(r.get('coverage') or '')}</td></tr>"
        for r in records)
    device_rows = "".join(
        f"<tr><td>{html.escape(d)}</td><td>{s['correct']}/{s['problems']}</td>"
        f"<td>{_fmt(s['fast_1_vs_eager'], True)}</td><td>{_fmt(s['geomean_speedup_vs_eager_failures_as_1'])}</td>"
        f"</tr>" for d, s in summary.get("per_device", {}).items())
    mixed = (f"<p style='color:#a40'><b>Mixed devices:</b> {html.escape(mixed_devices_note(summary['mixed_devices']))}"
             f"</p><h2>Per device</h2><table><tr><th>device</th><th>correct</th><th>fast_1 vs eager</th>"
             f"<th>geomean vs eager (failures 1.0×)</th></tr>{device_rows}</table>") if device_rows else ""
    meta_text = " · ".join(f"{html.escape(str(k))}: {html.escape(str(v))}" for k, v in meta.items())
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>KForge benchmark</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ddd;padding:4px 8px;font-size:14px}}th{{background:#f4f4f4}}</style></head><body>
<h1>KForge benchmark</h1><p>{meta_text}</p>
{_partial_html(summary)}<p>{_counts_html(summary)}
Correct but <b style="color:#c92a2a">slower than eager: {summary.get('correct_slower_than_eager', 0)}</b>, slower than
torch.compile: {summary.get('correct_slower_than_compiled', 0)} (their measured speedups, below 1×, are counted as
they are). Speedups measured beyond the noise bounds (the machine was busy or the timing unstable; each such
problem's <code>noise</code> says which timing): {summary.get('correct_noisy', 0)}.
fast_p is the share of all problems that are correct and more than p× faster than the baseline.</p>
<table><tr><th></th><th>vs eager</th><th>vs torch.compile</th></tr>{fast_rows}{geo_rows}</table>{mixed}
<h2>Per level and per kind</h2><table><tr><th></th><th>problems</th><th>correct</th><th>correct, slower than eager</th>
<th>failed</th><th>unsupported</th><th>error</th><th>stopped at the time limit</th><th>fast_1 vs eager</th><th>fast_1 vs compile</th>
<th>geomean vs the better baseline (correct only)</th></tr>{part_rows}</table>
{fig_a}{fig_b}
<h2>Problems</h2><p>In the order they ran (stratified by kind). <i>last verdict</i> and <i>reason</i>: the last
iteration's status and why a problem is not correct; <i>coverage</i>: what the agent says it covers of it.</p>
<table><tr><th>problem</th><th>level</th><th>kind</th><th>outcome</th><th>last verdict</th><th>candidate ms</th>
<th>eager ms</th><th>compile ms</th><th>vs eager</th><th>vs compile</th><th>own kernels</th><th>iterations</th>
<th>node</th><th>device</th><th>reason</th><th>coverage</th></tr>{problem_rows}</table>
</body></html>"""


def _counts_html(summary: dict) -> str:
    return f"<b>{html.escape(counts_text(summary))}</b> ({_fmt(summary['correctness_rate'], True)} correct)."


def _partial_html(summary: dict) -> str:
    text = partial_text(summary)
    return f"<p style='color:#a40'><b>{html.escape(text)}</b></p>" if text else ""


def _part_row(label: str, s: dict) -> str:
    return (f"<tr><td>{label}</td><td>{s['problems']}</td><td>{s['correct']}</td>"
            f"<td>{s.get('correct_slower_than_eager', 0)}</td><td>{s.get('failed', 0)}</td>"
            f"<td>{s.get('unsupported', 0)}</td><td>{s.get('error', 0)}</td><td>{s.get('stopped', 0)}</td>"
            f"<td>{_fmt(s['fast_1_vs_eager'], True)}</td><td>{_fmt(s['fast_1_vs_compiled'], True)}</td>"
            f"<td>{_fmt(s.get('geomean_speedup_vs_best_baseline_correct_only'))}</td></tr>")
