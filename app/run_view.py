"""The view of one run, live or replayed: header and actions, totals, the timeline of iterations, the chart, the
activity log, and the selected iteration's program, diff, result, profile, analysis and model I/O.

One flat fragment draws all of it. While the run is queued or running the fragment reruns every
`POLL_INTERVAL_S` and folds only the events that arrived since the last poll; once the run ends it triggers one
full rerun, after which the fragment is registered without `run_every` and polling stops. A stored run goes
through the same code with nothing left to poll.

Each poll redraws the view in the browser, so what a poll draws is kept small: only the open tab of the
iteration detail, the run inputs only while their expander is open, and the newest entries of the activity log.

The parts live in their own modules: `run_header` (title, status, actions), `run_totals` (the metrics row),
`run_detail` (timeline, writing box, the iteration's tabs, the inputs); this one polls and lays them out.
"""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from kforge_core.errors import KForgeError
from kforge_core.store import RunNotFound

from . import services
from .chart import figure
from .renderers import RenderContext, render
from .run_detail import inputs, iteration_detail, timeline, writing_box
from .run_header import BUILTIN_LABEL, LIVE_STATUSES, agent_label, config_from_run, header, resumable
from .run_state import RunState, apply, chart_points, collapse_repeats
from .run_totals import _wall_s, iteration_budget, totals

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

    header(run, state, live, pending)
    totals(run, state, live)
    selected = timeline(run, state)
    # Always the same slot for the "writing now" box, filled or not: an element that comes and goes shifts every
    # element after it, and Streamlit then briefly shows old elements in new places (a ghost Activity panel).
    with st.container(key=f"kf-writing:{run_id}"):
        if live and state.streaming is not None:
            writing_box(state)
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
        # A fragment of its own: a tab click reruns only the iteration's detail, not the header, totals, timeline,
        # chart and activity log around it (bench/ui_latency.py --kind tab).
        st.fragment(iteration_detail)(run, state, selected, ctx)
    inputs(run)

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


__all__ = ["BUILTIN_LABEL", "LIVE_STATUSES", "FEED_SHOWN", "show", "poll", "agent_label", "config_from_run",
           "iteration_detail", "iteration_budget", "resumable", "_wall_s"]
