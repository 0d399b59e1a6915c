"""Renderers of the run's activity log: one timestamped line per run-level event (passes, verdicts, new bests,
head-to-heads, the run's end, resumes and cancels)."""

from __future__ import annotations

import html

import streamlit as st

from kforge_core.formatting import checks_text, judged_text, noise_bounds_text
from kforge_core.store import EventKind

from .formatting import fmt_ms, fmt_when, fmt_x, run_badge, untrusted, verdict_badge
from .highlight import plain_html
from .render_registry import RenderContext, _html, renders


def _line(event: dict, text: str) -> None:
    st.markdown(f"<span class='kf-when'>{fmt_when(event.get('ts'))}</span> {text}", unsafe_allow_html=True)


@renders(EventKind.RUN_CREATED)
def run_created(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    who = f"`{d['model']}`" if d.get("model") else "the built-in synthesizer" if d.get("agent") == "builtin" \
        else "LLM agents"
    _line(event, f"Run created: **{d.get('problem_name')}** on `{d.get('target')}` with {who}")


@renders(EventKind.PASS_STARTED)
def pass_started(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    n = d.get("max_iterations")
    _line(event, f"**{str(d.get('pass', '')).capitalize()} pass** started (up to {n if n is not None else '?'} "
                 f"iteration{'' if n == 1 else 's'})")


@renders(EventKind.ITERATION_FINISHED)
def iteration_finished(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    speed = f" · {fmt_x(d['speedup_vs_eager'])} vs eager" if d.get("speedup_vs_eager") is not None else ""
    reason = d.get("reason") or ""
    short = untrusted(reason, limit=140)  # a candidate's error or output can be in it
    which = f"#{d['first_index']}–#{d.get('index')}" if d.get("repeats") else f"#{d.get('index')}"
    times = f" (×{d['repeats']})" if d.get("repeats") else ""
    _line(event, f"{which} {verdict_badge(d.get('status'))}{times}{speed} {short}")
    if len(" ".join(reason.split())) > 140:  # the whole reason one click away, in the log itself
        _html(f"<details class='kf-more'><summary>whole reason</summary>{plain_html(reason)}</details>")


@renders(EventKind.BEST_UPDATED)
def best_updated(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    sx = d.get("speedup_vs_eager")
    # the fastest correct program so far is not a gain while it is slower than eager: no green trophy then
    mark = ":orange[:material/slow_motion_video:] New best, still slower than eager" if sx is not None and sx < 1 \
        else ":green[:material/trophy:] New best"
    _line(event, f"{mark}: #{d.get('iteration')} at {fmt_ms(d.get('candidate_ms'))} "
                 f"({fmt_x(sx)} vs eager, {fmt_x(d.get('speedup_vs_compiled'))} vs compile)")


@renders(EventKind.SLOWER_THAN_BASELINE)
def slower_than_baseline(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    lost_to = " and ".join(d.get("slower_than") or ["eager"])
    _line(event, f":red[:material/slow_motion_video: **Slower than {lost_to}**] {untrusted(d.get('message', ''))}")


@renders(EventKind.HEAD_TO_HEAD)
def head_to_head(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    if d.get("error"):
        _line(event, f"Head to head not decided: {untrusted(d['error'])}")
    else:
        _line(event, f":material/sports_score: Head to head → best #{d.get('best_iteration')}. "
                     f"<span class='kf-when'>{html.escape(d.get('rule', ''))}</span>")
        _html(contest_table_html(d))
    setting = " · ".join(t for t in (judged_text(d.get("judged")), noise_bounds_text(d.get("noise_bounds"))) if t)
    if setting:
        st.caption(setting[:1].upper() + setting[1:])
    for warning in d.get("warnings") or []:
        st.warning(warning, icon=":material/warning:")


# the table's columns; each contender's checks and warnings are listed under it (the activity log is a narrow column)
CONTEST_COLUMNS = ("contender", "median", "min", "max", "trials", "vs eager", "vs compile")


def contest_rows(d: dict) -> list[dict[str, str]]:
    """The head-to-head as a reader sees it: one row per contender (the best marked, a noisy one said so), then
    the baselines; every value is text, the table's columns plus `checks` and `warnings`."""
    rows = []
    for r in d.get("contenders") or []:
        name = f"#{r.get('iteration')}" + (" (best)" if r.get("iteration") == d.get("best_iteration") else "")
        rows.append({"contender": name + (" — noisy" if r.get("noisy") else ""),
                     **_spread_cells(r.get("candidate_ms"), r), "vs eager": fmt_x(r.get("speedup_vs_eager")),
                     "vs compile": fmt_x(r.get("speedup_vs_compiled")),
                     # a run recorded before checks and warnings were kept has neither key: said, not "none"
                     "checks": checks_text(r["checks"]) or "none" if "checks" in r else "not recorded",
                     "warnings": "; ".join(r["warnings"]) or "none" if "warnings" in r else "not recorded"})
    for label, t in (("eager", d.get("eager")), ("torch.compile", d.get("compiled"))):
        if t:
            rows.append({"contender": label, **_spread_cells(t.get("median_ms"), t), "vs eager": "",
                         "vs compile": "", "checks": "", "warnings": ""})
    return rows


def _spread_cells(median_ms, t: dict) -> dict[str, str]:
    return {"median": fmt_ms(median_ms), "min": fmt_ms(t.get("min_ms")), "max": fmt_ms(t.get("max_ms")),
            "trials": str(t.get("trials") if t.get("trials") is not None else "—")}


def contest_table_html(d: dict) -> str:
    rows = contest_rows(d)
    head = "".join(f"<th>{c}</th>" for c in CONTEST_COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(row[c])}</td>" for c in CONTEST_COLUMNS) + "</tr>"
                   for row in rows)
    notes = "".join(f"<li><b>{html.escape(row['contender'].split()[0])}</b> checks: {html.escape(row['checks'])}"
                    f"<br>warnings: {html.escape(row['warnings'])}</li>" for row in rows if row["checks"])
    return (f"<table class='kf-contest'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"<ul class='kf-contest-notes'>{notes}</ul>")


@renders(EventKind.RUN_FINISHED)
def run_finished(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    best = (f"; best #{d['best_iteration']} at {fmt_x(d.get('best_speedup_vs_eager'))} vs eager"
            if d.get("best_iteration") is not None else "; no correct program")
    err = f" — {untrusted(d['error'])}" if d.get("error") else ""
    stop = d.get("stop_reason")
    stopped = f" · stopped: {untrusted(stop)}" if stop and stop != d.get("error") else ""
    _line(event, f"Run finished {run_badge(d.get('status'), d.get('best_speedup_vs_eager'))}{best}{err}{stopped}")


@renders(EventKind.RUN_INTERRUPTED)
def run_interrupted(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    why = {"worker_dead": f"its worker process {d.get('worker_pid')} is gone",
           "heartbeat_stale": "its worker stopped reporting"}.get(d.get("reason"), untrusted(d.get("reason")))
    _line(event, f"{run_badge('interrupted')} {why}; it can be resumed")


@renders(EventKind.RUN_RESUMED)
def run_resumed(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    where = f"after iteration #{d['from_iteration']}" if d.get("from_iteration") is not None else "from the start"
    _line(event, f"Resumed {where} (was {d.get('previous_status')})")


@renders(EventKind.CANCEL_REQUESTED)
def cancel_requested(event: dict, ctx: RenderContext) -> None:
    _line(event, "Cancel requested; the worker stops after the current step")
