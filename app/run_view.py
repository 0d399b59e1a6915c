"""The view of one run, live or replayed: header and actions, totals, the timeline of iterations, the chart, the
activity log, and the selected iteration's program, diff, result, profile, analysis and model I/O.

One flat fragment draws all of it. While the run is queued or running the fragment reruns every
`POLL_INTERVAL_S` and folds only the events that arrived since the last poll; once the run ends it triggers one
full rerun, after which the fragment is registered without `run_every` and polling stops. A stored run goes
through the same code with nothing left to poll.

Each poll redraws the view in the browser, so what a poll draws is kept small: only the open tab of the
iteration detail, the run inputs only while their expander is open, and the newest entries of the activity log.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import streamlit as st

from kforge_core.errors import KForgeError
from kforge_core.store import RunNotFound

from . import services
from .chart import figure
from .formatting import (fmt_cost, fmt_duration, fmt_ms, fmt_tokens, fmt_when, fmt_x, parse_ts,
                         run_badge, verdict_badge, verdict_icon)
from .navigation import page_path
from .renderers import EMPTY, TABS, RenderContext, order_of, render, tab_of
from .run_state import RunState, apply, chart_points

LIVE_STATUSES = ("queued", "running")
RESUMABLE_STATUSES = ("interrupted", "failed", "cancelled")
BUILTIN_LABEL = "built-in, rule-based (no LLM)"
# How often a live view asks the store to mark runs whose worker died (the check reads every live run's row).
STALE_CHECK_EVERY_S = 5.0
# The activity log shows the newest entries only: the live view redraws it on every poll.
FEED_SHOWN = 60


def show(run_id: str) -> None:
    """Draw run `run_id`; polls while it is live."""
    try:
        with services.store() as s:
            status = s.get_run(run_id)["status"]
    except RunNotFound:
        st.error(f"There is no run `{run_id}` in {services.db_path()}. It may have been deleted, or this link "
                 "belongs to another KForge installation (KFORGE_DB).", icon=":material/search_off:")
        return
    live = status in LIVE_STATUSES
    st.fragment(_body, run_every=services.POLL_INTERVAL_S if live else None)(run_id, live)


def _state(run_id: str) -> RunState:
    key = f"kf-runstate:{run_id}"
    if key not in st.session_state:
        st.session_state[key] = RunState(run_id)
    return st.session_state[key]


def poll(run_id: str) -> tuple[dict[str, Any], RunState]:
    """The run's row and its state with every event stored so far folded in (only new events are read)."""
    state = _state(run_id)
    with services.store() as s:
        if st.session_state.get("kf-last-stale-check", 0.0) + STALE_CHECK_EVERY_S < time.monotonic():
            st.session_state["kf-last-stale-check"] = time.monotonic()
            s.mark_interrupted_runs()
        # The row first: events committed with a status change (run_finished) are then in the read below.
        run = s.get_run(run_id)
        apply(state, s.events(run_id, after_seq=state.last_seq))
    return run, state


def _body(run_id: str, was_live: bool) -> None:
    try:
        run, state = poll(run_id)
    except KForgeError as exc:
        st.error(f"Could not read the run store: {exc}", icon=":material/database:")
        return
    live = run["status"] in LIVE_STATUSES
    target = services.target_info(run["target"], wait=False)
    ctx = RenderContext(state=state, kernel_language=target.kernel_language if target else "cpp")

    _header(run, state, live)
    _totals(run, state, live)
    selected = _timeline(run, state)
    if live and state.streaming is not None:
        _writing_box(state)
    left, right = st.columns([3, 2], gap="medium")
    with left:
        points = chart_points(state)
        if any(p["candidate_ms"] is not None or p["status"] for p in points):
            st.plotly_chart(_figure(points), key=f"kf-chart:{run_id}", config={"displayModeBar": False})
        else:
            st.info("The chart fills in as iterations are evaluated: time per iteration against eager PyTorch and "
                    "torch.compile, and the speedups.", icon=":material/monitoring:")
    with right:
        st.markdown("**Activity**")
        with st.container(height=330, autoscroll=True):
            if not state.feed:
                st.caption("Nothing yet.")
            hidden = len(state.feed) - FEED_SHOWN
            if hidden > 0:
                st.caption(f"{hidden} earlier entries not shown; every iteration is in the timeline above.")
            for event in state.feed[-FEED_SHOWN:]:
                render(event, RenderContext(state=state, kernel_language=ctx.kernel_language, compact=True))
    if selected is not None:
        _iteration_detail(run, state, selected, ctx)
    _inputs(run)

    if was_live and not live:
        st.rerun(scope="app")  # re-register the fragment without run_every: polling stops


def _figure(points: list[dict[str, Any]]):
    """The chart, rebuilt only when its points changed: building a plotly figure costs ~30 ms of CPU (most of a
    poll's work), and most polls bring streamed text, not new measurements."""
    key = repr(points)
    cached = st.session_state.get("kf-figure")
    if cached is None or cached[0] != key:
        cached = (key, figure(points))
        st.session_state["kf-figure"] = cached
    return cached[1]


# --------------------------------------------------------------------------------------------------- header

def agent_label(run: dict[str, Any]) -> str:
    config = run.get("config") or {}
    if run.get("agent") == "builtin":
        return BUILTIN_LABEL
    model = run.get("model") or "model"
    analysis = run.get("analysis_model")
    endpoint = f"`{config['base_url']}`" if config.get("base_url") else "the configured endpoint"
    both = f"`{model}`" + (f" (analysis: `{analysis}`)" if analysis and analysis != model else "")
    return f"{both} @ {endpoint}"


def _header(run: dict[str, Any], state: RunState, live: bool) -> None:
    target = services.target_info(run["target"], wait=False)
    title_col, actions = st.columns([3, 2], vertical_alignment="bottom")
    with title_col:
        st.markdown(f"### {run['problem_name']}  {run_badge(run['status'])}")
        st.caption(f"on **{target.title if target else run['target']}** · {agent_label(run)} · run `{run['id']}` · "
                   f"started {fmt_when(run['created_at'])}")
        if run.get("error") and not live:
            st.error(run["error"], icon=":material/error:")
    with actions, st.container(horizontal=True, horizontal_alignment="right"):
        if live:
            requested = bool(run.get("cancel_requested"))
            if st.button("Cancelling…" if requested else "Cancel run", icon=":material/stop_circle:",
                         disabled=requested, key=f"kf-cancel:{run['id']}"):
                _cancel(run["id"])
        elif run["status"] in RESUMABLE_STATUSES and services.loop_module() is not None:
            if st.button("Resume", icon=":material/play_arrow:", key=f"kf-resume:{run['id']}"):
                _resume(run)
        best = _best_code(run)
        st.download_button("Best program", best or "", file_name=f"{run['problem_name']}_best.py",
                           mime="text/x-python", disabled=best is None, icon=":material/download:",
                           on_click="ignore", key=f"kf-dl-best:{run['id']}",
                           help="the fastest correct program so far" if best else "no correct program yet")
        st.page_link(page_path("compare"), label="Compare", icon=":material/compare_arrows:",
                     query_params={"a": f"{run['id']}:{run['best_iteration']}"} if run.get("best_iteration")
                     is not None else {"a": run["id"]})


def _best_code(run: dict[str, Any]) -> str | None:
    """The best program's code, read once per new best (not on every poll)."""
    if run.get("best_iteration") is None:
        return None
    key = f"kf-best-code:{run['id']}:{run['best_iteration']}"
    if key not in st.session_state:
        try:
            with services.store() as s:
                st.session_state[key] = s.get_iteration(run["id"], run["best_iteration"]).get("code")
        except KForgeError:
            return None
    return st.session_state[key]


def _cancel(run_id: str) -> None:
    loop = services.loop_module()
    try:
        if loop is not None:
            loop.cancel_run(services.db_path(), run_id)
        else:
            with services.store() as s:
                s.request_cancel(run_id)
        st.toast("Cancel requested: the worker stops after its current step.", icon=":material/stop_circle:")
    except KForgeError as exc:
        st.error(f"Could not cancel: {exc}")


def config_from_run(run: dict[str, Any], loop) -> Any:
    """Rebuild the run's RunConfig from what the store kept. The API key never is stored: it comes from the
    environment or the settings file, as for a new run."""
    api_key = None
    if run.get("agent") == "llm":
        cfg, _ = services.llm_defaults()
        api_key = cfg.api_key if cfg is not None else None
    return loop.RunConfig.from_run(run, api_key=api_key)


def _resume(run: dict[str, Any]) -> None:
    loop = services.loop_module()
    try:
        # Detached, like a new run: the worker continues from the last finished iteration.
        loop.launch_worker(services.db_path(), run["id"], config_from_run(run, loop), resume=True)
    except (KForgeError, TypeError, ValueError) as exc:
        st.error(f"Could not resume this run: {exc}")
        return
    st.session_state.pop(f"kf-runstate:{run['id']}", None)
    st.rerun(scope="app")


# --------------------------------------------------------------------------------------------------- totals

def _wall_s(run: dict[str, Any], live: bool) -> float | None:
    start = parse_ts(run.get("created_at"))
    end = parse_ts(run.get("finished_at")) or (dt.datetime.now(dt.timezone.utc) if live
                                               else parse_ts(run.get("updated_at")))
    return (end - start).total_seconds() if start and end else None


def _totals(run: dict[str, Any], state: RunState, live: bool) -> None:
    config = run.get("config") or {}
    budget = sum(p.get("max_iterations") or 0 for p in state.passes) or (
        (config.get("max_functional_iters") or 0) + (config.get("max_optimization_iters") or 0)) or None
    done = sum(1 for it in state.iterations.values() if it.finished)
    prompt_tokens = run.get("tokens_prompt") or state.tokens_prompt
    completion_tokens = run.get("tokens_completion") or state.tokens_completion
    cost = fmt_cost(prompt_tokens, completion_tokens, *services.prices())
    best_it = run.get("best_iteration")
    cols = st.columns(6)
    cols[0].metric("Best vs eager", fmt_x(run.get("best_speedup_vs_eager")),
                   help="eager PyTorch time ÷ the best correct program's time")
    cols[1].metric("Best vs torch.compile", fmt_x(run.get("best_speedup_vs_compiled")))
    cols[2].metric("Best time", fmt_ms(run.get("best_candidate_ms")),
                   help=f"iteration #{best_it}" if best_it is not None else "no correct program yet")
    cols[3].metric("Iterations", f"{done}" + (f" / {budget}" if budget else ""))
    if run.get("agent") == "builtin" and not (prompt_tokens or completion_tokens):
        cols[4].metric("Tokens", "none", help="the built-in synthesizer uses no LLM")
    else:
        cols[4].metric("Tokens", f"{fmt_tokens(prompt_tokens)} / {fmt_tokens(completion_tokens)}",
                       help="prompt / completion tokens, all agents" + ("" if cost else
                            "; set prices per 1M tokens in Settings to see the cost"))
    cols[5].metric("Wall time", fmt_duration(_wall_s(run, live)),
                   help=f"cost {cost}" if cost else "set prices per 1M tokens in Settings to see the cost")
    if cost:
        st.caption(f"Cost so far: **{cost}** (at your prices per 1M tokens from Settings)")


# --------------------------------------------------------------------------------------------------- timeline

def _label(state: RunState, index: int) -> str:
    it = state.iterations[index]
    mark = "F" if it.pass_name == "functional" else "O" if it.pass_name == "optimization" else ""
    text = f"{mark}{index} {verdict_icon(it.status)}"
    if it.status == "correct" and it.speedup_vs_eager is not None:
        text += f" {it.speedup_vs_eager:.2f}×"
    return text


def _timeline(run: dict[str, Any], state: RunState) -> int | None:
    """The iterations as a row of buttons (F = functional pass, O = optimization pass, icon = verdict), the selected
    one highlighted. Follows the newest iteration until the user picks an older one; picking the newest again
    resumes following. Plain buttons rather than a selection widget: a widget's value would have to be re-synced
    with the browser each time an iteration appears during polling."""
    options = sorted(state.iterations)
    if not options:
        st.caption("Waiting for the first iteration…" if run["status"] in LIVE_STATUSES else "This run has no "
                   "iterations.")
        return None
    follow_key, pick_key = f"kf-follow:{run['id']}", f"kf-pick:{run['id']}"
    latest = options[-1]
    picked = st.session_state.get(pick_key)
    selected = latest if st.session_state.get(follow_key, True) or picked not in options else picked

    def pick(index: int, newest: int) -> None:
        st.session_state[pick_key] = index
        st.session_state[follow_key] = index == newest

    passes = " · ".join(f"**{p['pass'].capitalize()}** (up to {_n(p.get('max_iterations'), 'iteration')})"
                        for p in state.passes)
    st.markdown(f"Iterations — {passes}" if passes else "Iterations",
                help="F = functional pass (make it correct), O = optimization pass (make it fast). The newest "
                     "iteration is followed until you pick another; pick the newest again to follow.")
    with st.container(horizontal=True, wrap=True, gap="small", key=f"kf-timeline:{run['id']}"):
        for index in options:
            st.button(_label(state, index), key=f"kf-it:{run['id']}:{index}", on_click=pick, args=(index, latest),
                      type="primary" if index == selected else "secondary")
    return selected


def _n(count: int | None, noun: str) -> str:
    if count is None:
        return f"? {noun}s"
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _writing_box(state: RunState) -> None:
    event = state.streaming
    agent = (event["data"] or {}).get("agent") or "generation"
    where = f" iteration #{event['iteration']}" if event.get("iteration") is not None else ""
    st.markdown(f":blue[:material/edit_note:] **The {agent} agent is writing{where}…**")
    merged = state.iterations[event["iteration"]].events[-1] if event.get("iteration") in state.iterations else event
    render(merged, RenderContext(state=state, compact=True))


# --------------------------------------------------------------------------------------------------- detail

def _iteration_detail(run: dict[str, Any], state: RunState, index: int, ctx: RenderContext) -> None:
    it = state.iterations.get(index)
    if it is None:
        return
    pass_text = f"{it.pass_name} pass" if it.pass_name else ""
    status = verdict_badge(it.status) if it.status else verdict_badge("running")
    speed = (f" · **{fmt_x(it.speedup_vs_eager)}** vs eager, **{fmt_x(it.speedup_vs_compiled)}** vs torch.compile · "
             f"{fmt_ms(it.candidate_ms)}" if it.candidate_ms is not None else "")
    reason = ""
    if it.reason and it.status not in (None, "correct"):
        first = it.reason.splitlines()[0]
        reason = " · " + (first[:157] + "…" if len(first) > 160 else first)
    st.markdown(f"#### Iteration #{index} <span class='kf-when'>{pass_text}</span>", unsafe_allow_html=True)
    stage = f" · :blue[{it.stage}…]" if it.stage and not it.finished else ""
    st.markdown(f"{status}{speed}{reason}{stage}")
    by_tab: dict[str, list[dict]] = {name: [] for name in TABS}
    for event in it.events:
        by_tab[tab_of(event)].append(event)
    # Only the open tab is drawn: a live view redraws on every poll, and drawing every tab re-sent the highlighted
    # program, kernel sources and diff each time (most of what the browser had to re-render). Switching tabs
    # reruns this fragment, which draws the newly opened one.
    containers = st.tabs(list(TABS), key=f"kf-tabs:{run['id']}", on_change="rerun")
    for name, container in zip(TABS, containers):
        if container.open is False:
            continue
        with container:
            events = sorted(by_tab[name], key=lambda e: (order_of(e), e["seq"]))
            if not events:
                st.caption(EMPTY[name])
            for event in events:
                render(event, ctx)


def _inputs(run: dict[str, Any]) -> None:
    inputs = st.expander("Run inputs: the problem, the settings, the reference program",
                         key=f"kf-inputs:{run['id']}", on_change="rerun")
    if inputs.open is False:  # drawn only while open, like the tabs above
        return
    with inputs:
        st.markdown("**Problem** (the PyTorch reference)")
        from .highlight import to_html

        st.html(to_html(run.get("problem_source") or "", "python"))
        config = {k: v for k, v in (run.get("config") or {}).items() if k not in ("problem_source", "api_key",
                                                                                  "reference_program")}
        st.markdown("**Settings**")
        st.json(config, expanded=False)
        if run.get("reference_program"):
            st.markdown(f"**Reference program** (for `{run.get('reference_target') or 'another target'}`)")
            st.html(to_html(run["reference_program"], "python"))


__all__ = ["show", "poll", "agent_label", "config_from_run"]
