"""Renderers of the run's activity log: one timestamped line per run-level event (passes, verdicts, new bests,
head-to-heads, the run's end, resumes and cancels)."""

from __future__ import annotations

import streamlit as st

from kforge_core.store import EventKind

from .formatting import fmt_ms, fmt_when, fmt_x, run_badge, verdict_badge
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
    short = reason if len(reason) <= 140 else reason[:139] + "…"
    which = f"#{d['first_index']}–#{d.get('index')}" if d.get("repeats") else f"#{d.get('index')}"
    times = f" (×{d['repeats']})" if d.get("repeats") else ""
    _line(event, f"{which} {verdict_badge(d.get('status'))}{times}{speed} {short}")
    if short != reason:  # the whole reason one click away, in the log itself
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
    _line(event, f":red[:material/slow_motion_video: **Slower than {lost_to}**] {d.get('message', '')}")


@renders(EventKind.HEAD_TO_HEAD)
def head_to_head(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    if d.get("error"):
        _line(event, f"Head to head not decided: {d['error']}")
        return
    rows = ", ".join(f"#{r.get('iteration')} {fmt_ms(r.get('candidate_ms'))} (min {fmt_ms(r.get('min_ms'))}, max "
                     f"{fmt_ms(r.get('max_ms'))}, {r.get('trials')} trials)" for r in d.get("contenders") or [])
    _line(event, f":material/sports_score: Head to head: {rows} → best #{d.get('best_iteration')}. "
                 f"<span class='kf-when'>{d.get('rule', '')}</span>")


@renders(EventKind.RUN_FINISHED)
def run_finished(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    best = (f"; best #{d['best_iteration']} at {fmt_x(d.get('best_speedup_vs_eager'))} vs eager"
            if d.get("best_iteration") is not None else "; no correct program")
    err = f" — {d['error']}" if d.get("error") else ""
    stopped = (f" · stopped: {d['stop_reason']}" if d.get("stop_reason") and d.get("stop_reason") != d.get("error")
               else "")
    _line(event, f"Run finished {run_badge(d.get('status'), d.get('best_speedup_vs_eager'))}{best}{err}{stopped}")


@renders(EventKind.RUN_INTERRUPTED)
def run_interrupted(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    why = {"worker_dead": f"its worker process {d.get('worker_pid')} is gone",
           "heartbeat_stale": "its worker stopped reporting"}.get(d.get("reason"), d.get("reason"))
    _line(event, f"{run_badge('interrupted')} {why}; it can be resumed")


@renders(EventKind.RUN_RESUMED)
def run_resumed(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    where = f"after iteration #{d['from_iteration']}" if d.get("from_iteration") is not None else "from the start"
    _line(event, f"Resumed {where} (was {d.get('previous_status')})")


@renders(EventKind.CANCEL_REQUESTED)
def cancel_requested(event: dict, ctx: RenderContext) -> None:
    _line(event, "Cancel requested; the worker stops after the current step")
