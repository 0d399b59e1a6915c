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
from .formatting import (fmt_cost, fmt_duration, fmt_ms, fmt_tokens, fmt_when, fmt_x, parse_ts, slowdown_delta,
                         run_badge, verdict_badge, verdict_icon)
from .navigation import page_path
from .renderers import EMPTY, TABS, RenderContext, order_of, render, tab_of
from .run_state import RunState, apply, chart_points, collapse_repeats

LIVE_STATUSES = ("queued", "running")
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
    live = status in LIVE_STATUSES or _resume_pending(run_id, status)
    if live:
        # A poll reruns the view every POLL_INTERVAL_S; Streamlit fades the elements of a rerun in progress
        # ("stale") after a moment, so under load the whole view blinked. Here a rerun only brings newer data.
        st.html(f"<style>{NO_STALE_FADE_CSS}</style>")
    st.fragment(_body, run_every=services.POLL_INTERVAL_S if live else None)(run_id, live)


NO_STALE_FADE_CSS = ".stElementContainer[data-stale='true'] {opacity: 1 !important; transition: none !important}"


# A resumed run is live before its worker says so: the worker process takes seconds to start and mark the run
# running, and a view drawn in between would stop polling and keep showing the old status. The view polls while a
# resume it asked for is pending, up to this long (a worker that never starts leaves the run as it was).
RESUME_PENDING_S = 120.0


def _resume_pending(run_id: str, status: str) -> bool:
    key = f"kf-resuming:{run_id}"
    since = st.session_state.get(key)
    if since is None:
        return False
    if status in LIVE_STATUSES or time.monotonic() - since > RESUME_PENDING_S:
        st.session_state.pop(key, None)  # the worker took over (or never came): the status speaks for itself
        return False
    return True


def resumable(run: dict[str, Any]) -> bool:
    """Whether Resume could change anything. A cancelled or interrupted run has work left. A failed run resumes
    only when an LLM endpoint failed (a key or server fixed since may let it go on); a failure of the built-in
    synthesizer or a spent budget would repeat as it was."""
    if run.get("kind") == "manual":  # a manual run goes on from the Workbench, one evaluation at a time
        return False
    if run["status"] in ("interrupted", "cancelled"):
        return True
    if run["status"] != "failed" or run.get("agent") == "builtin":
        return False
    return "endpoint" in (run.get("error") or "")


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
    pending = _resume_pending(run_id, run["status"])
    live = run["status"] in LIVE_STATUSES or pending
    target = services.target_info(run["target"], wait=False)
    builtin = run.get("agent") == "builtin"
    ctx = RenderContext(state=state, kernel_language=target.kernel_language if target else "cpp", builtin=builtin)

    _header(run, state, live, pending)
    _totals(run, state, live)
    selected = _timeline(run, state)
    # Always the same slot for the "writing now" box, filled or not: an element that comes and goes shifts every
    # element after it, and Streamlit then briefly shows old elements in new places (a ghost Activity panel).
    with st.container(key=f"kf-writing:{run_id}"):
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
            feed = collapse_repeats(state.feed)
            hidden = len(feed) - FEED_SHOWN
            if hidden > 0:
                st.caption(f"{hidden} earlier entries not shown; every iteration is in the timeline above.")
            for event in feed[-FEED_SHOWN:]:
                render(event, RenderContext(state=state, kernel_language=ctx.kernel_language, compact=True,
                                            builtin=builtin))
    if selected is not None:
        iteration_detail(run, state, selected, ctx)
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
    if run.get("kind") == "manual":
        return f"manual run, written by {run.get('author') or 'a person'}"
    if run.get("agent") == "builtin":
        return BUILTIN_LABEL
    model = run.get("model") or "model"
    analysis = run.get("analysis_model")
    endpoint = f"`{config['base_url']}`" if config.get("base_url") else "the configured endpoint"
    both = f"`{model}`" + (f" (analysis: `{analysis}`)" if analysis and analysis != model else "")
    return f"{both} @ {endpoint}"


def _header(run: dict[str, Any], state: RunState, live: bool, pending: bool = False) -> None:
    target = services.target_info(run["target"], wait=False)
    title_col, actions = st.columns([3, 2], vertical_alignment="bottom")
    with title_col:
        badge = run_badge("queued") if pending else run_badge(run["status"], run.get("best_speedup_vs_eager"))
        st.markdown(f"### {run['problem_name']}  {badge}")
        st.caption(f"on **{target.title if target else run['target']}** · {agent_label(run)} · run `{run['id']}` · "
                   f"started {fmt_when(run['created_at'])}")
        if pending:
            st.caption("Resuming: waiting for the worker process to pick the run up…")
        elif run.get("error") and not live and run["status"] == "unsupported":
            st.info(f"The agent cannot write this problem: {run['error']}", icon=":material/block:")
        elif run.get("error") and not live:
            st.error(run["error"], icon=":material/error:")
        stop_reason = (state.finished or {}).get("stop_reason")
        if stop_reason and not live and stop_reason != run.get("error"):
            st.caption(f"Stopped: {stop_reason}")
    with actions, st.container(horizontal=True, horizontal_alignment="right"):
        if pending:
            st.button("Resuming…", icon=":material/play_arrow:", disabled=True, key=f"kf-resuming-btn:{run['id']}")
        elif live:
            requested = bool(run.get("cancel_requested"))
            if st.button("Cancelling…" if requested else "Cancel run", icon=":material/stop_circle:",
                         disabled=requested, key=f"kf-cancel:{run['id']}"):
                _cancel(run["id"])
        elif resumable(run) and services.loop_module() is not None:
            if st.button("Resume", icon=":material/play_arrow:", key=f"kf-resume:{run['id']}"):
                _resume(run)
        best = _best_code(run)
        st.download_button("Best program", best or "", file_name=f"{run['problem_name']}_best.py",
                           mime="text/x-python", disabled=best is None, icon=":material/download:",
                           on_click="ignore", key=f"kf-dl-best:{run['id']}",
                           help=("no correct program yet" if not best else
                                 "the fastest correct program, but slower than eager PyTorch: no kernel beats eager"
                                 if (run.get("best_speedup_vs_eager") or 1.0) < 1.0 else
                                 "the fastest correct program so far"))
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
    st.session_state[f"kf-resuming:{run['id']}"] = time.monotonic()
    st.rerun(scope="app")


# --------------------------------------------------------------------------------------------------- totals

def _wall_s(run: dict[str, Any], state: RunState, live: bool) -> float | None:
    """Time the run spent working: the sum of its sessions (created, each resume), not the idle time between a
    cancel and a resume. Without session events (an old record) the span from creation to the end."""
    now = dt.datetime.now(dt.timezone.utc)
    total, counted = 0.0, False
    for start_ts, end_ts in state.sessions:
        start = parse_ts(start_ts)
        end = parse_ts(end_ts) or (now if live else parse_ts(run.get("finished_at") or run.get("updated_at")))
        if start and end:
            total += max(0.0, (end - start).total_seconds())
            counted = True
    if counted:
        return total
    start = parse_ts(run.get("created_at"))
    end = parse_ts(run.get("finished_at")) or (now if live else parse_ts(run.get("updated_at")))
    return (end - start).total_seconds() if start and end else None


def iteration_budget(run: dict[str, Any], state: RunState) -> int | None:
    """The most iterations the run may take, from its settings (both passes, k candidates a step), so the number
    does not change as passes start; the passes' own announcements only for runs without stored settings."""
    if run.get("kind") == "manual":  # a person's versions: no budget
        return None
    config = run.get("config") or {}
    steps = (config.get("max_functional_iters") or 0) + (config.get("max_optimization_iters") or 0)
    if steps:
        return steps * max(1, int(config.get("best_of_k") or 1))
    return sum(p.get("max_iterations") or 0 for p in state.passes) or None


def _totals(run: dict[str, Any], state: RunState, live: bool) -> None:
    budget = iteration_budget(run, state)
    done = sum(1 for it in state.iterations.values() if it.finished)
    prompt_tokens = run.get("tokens_prompt") or state.tokens_prompt
    completion_tokens = run.get("tokens_completion") or state.tokens_completion
    # each call's recorded cost (per agent, at its price then) where the loop priced them; else today's prices
    cost = (f"{state.cost:.4f}" if state.cost < 1 else f"{state.cost:.2f}") if state.cost is not None else \
        fmt_cost(prompt_tokens, completion_tokens, *services.prices())
    best_it = run.get("best_iteration")
    cols = st.columns(6)
    cols[0].metric("Best vs eager", fmt_x(run.get("best_speedup_vs_eager")),
                   help="eager PyTorch time ÷ the best correct program's time",
                   **slowdown_delta(run.get("best_speedup_vs_eager"), "eager"))
    cols[1].metric("Best vs torch.compile", fmt_x(run.get("best_speedup_vs_compiled")),
                   **slowdown_delta(run.get("best_speedup_vs_compiled"), "torch.compile"))
    cols[2].metric("Best time", fmt_ms(run.get("best_candidate_ms")),
                   help=f"iteration #{best_it}" if best_it is not None else "no correct program yet")
    cols[3].metric("Iterations", f"{done}" + (f" / {budget}" if budget else ""),
                   help="finished / the most the run may take (functional + optimization passes); a run stops "
                        "early once a pass has nothing left to do")
    if run.get("agent") in ("builtin", "manual") and not (prompt_tokens or completion_tokens):
        cols[4].metric("Tokens", "none", help="no LLM was called (the built-in agents, or a person's versions)")
    else:
        cols[4].metric("Tokens", f"{fmt_tokens(prompt_tokens)} / {fmt_tokens(completion_tokens)}",
                       help="prompt / completion tokens, all agents" + ("" if cost else
                            "; set prices per 1M tokens in Settings to see the cost"))
    cols[5].metric("Wall time", fmt_duration(_wall_s(run, state, live)),
                   help="time the run spent working (not the idle time between a cancel and a resume)"
                        + (f"; cost {cost}" if cost else ""))
    if cost:
        st.caption(f"Cost so far: **{cost}** (at your prices per 1M tokens from Settings)")
    _slowdown_warning(run, state, live)


def _slowdown_warning(run: dict[str, Any], state: RunState, live: bool) -> None:
    """Beside the best speedup: a best slower than eager is said in words, never left to read as a result. The
    finished run's words are the loop's own (its `slower_than_baseline` event: what it loses to, what to use)."""
    if state.slower and not live:
        box = st.error if "eager" in (state.slower.get("slower_than") or []) else st.warning
        box(state.slower.get("message") or "No kernel beats eager PyTorch.", icon=":material/slow_motion_video:")
        return
    speedup = run.get("best_speedup_vs_eager")
    if speedup is not None and speedup < 1.0:
        st.warning(f"The best correct program so far is **{1 / speedup:.2f}x slower than eager PyTorch** "
                   f"({fmt_x(speedup)}): not a speedup" + (" yet; the run goes on." if live else "."),
                   icon=":material/slow_motion_video:")


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
    if run["status"] in LIVE_STATUSES:
        selected = latest if st.session_state.get(follow_key, True) or picked not in options else picked
    else:  # a finished run opens on its best program (its last iteration may hold none)
        best = run.get("best_iteration")
        selected = picked if picked in options else best if best in options else latest

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

def iteration_detail(run: dict[str, Any], state: RunState, index: int, ctx: RenderContext,
                     editable: bool = True, default_tab: str | None = None) -> None:
    """One iteration: its verdict line, then its tabs (the open one drawn; `default_tab` first). `editable`: with a
    link that opens its program in the Workbench."""
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
    if editable and it.code:
        st.page_link(page_path("workbench"), label="Edit in Workbench", icon=":material/edit:",
                     query_params={"run": run["id"], "iteration": str(index)})
    by_tab: dict[str, list[dict]] = {name: [] for name in TABS}
    for event in it.events:
        by_tab[tab_of(event)].append(event)
    # Only the open tab is drawn: a live view redraws on every poll, and drawing every tab re-sent the highlighted
    # program, kernel sources and diff each time (most of what the browser had to re-render). Switching tabs
    # reruns this fragment, which draws the newly opened one.
    containers = st.tabs(list(TABS), key=f"kf-tabs:{run['id']}", on_change="rerun", default=default_tab)
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


__all__ = ["show", "poll", "agent_label", "config_from_run", "iteration_detail"]
