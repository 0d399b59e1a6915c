"""The run view's timeline of iterations (one button each), the "writing now" box, the selected iteration's tabs
(only the open one drawn) and the run's inputs."""

from __future__ import annotations

from typing import Any

import streamlit as st

from .formatting import fmt_ms, fmt_x, untrusted, verdict_badge, verdict_icon
from .highlight import to_html
from .navigation import page_path
from .renderers import EMPTY, TABS, RenderContext, order_of, render, tab_of
from .run_header import LIVE_STATUSES
from .run_state import RunState


def _label(state: RunState, index: int) -> str:
    it = state.iterations[index]
    mark = "F" if it.pass_name == "functional" else "O" if it.pass_name == "optimization" else ""
    text = f"{mark}{index} {verdict_icon(it.status)}"
    if it.status == "correct" and it.speedup_vs_eager is not None:
        text += f" {it.speedup_vs_eager:.2f}×"
    return text


def timeline(run: dict[str, Any], state: RunState) -> int | None:
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


def writing_box(state: RunState) -> None:
    event = state.streaming
    agent = (event["data"] or {}).get("agent") or "generation"
    where = f" iteration #{event['iteration']}" if event.get("iteration") is not None else ""
    st.markdown(f":blue[:material/edit_note:] **The {agent} agent is writing{where}…**")
    merged = state.iterations[event["iteration"]].events[-1] if event.get("iteration") in state.iterations else event
    render(merged, RenderContext(state=state, compact=True))


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
        reason = " · " + untrusted(it.reason.splitlines()[0], limit=160)
    st.markdown(f"#### Iteration #{index} <span class='kf-when'>{pass_text}</span>", unsafe_allow_html=True)
    stage = f" · :blue[{untrusted(it.stage)}…]" if it.stage and not it.finished else ""
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


def inputs(run: dict[str, Any]) -> None:
    box = st.expander("Run inputs: the problem, the settings, the reference program",
                      key=f"kf-inputs:{run['id']}", on_change="rerun")
    if box.open is False:  # drawn only while open, like the tabs above
        return
    with box:
        st.markdown("**Problem** (the PyTorch reference)")
        st.html(to_html(run.get("problem_source") or "", "python"))
        config = {k: v for k, v in (run.get("config") or {}).items() if k not in ("problem_source", "api_key",
                                                                                  "reference_program")}
        st.markdown("**Settings**")
        st.json(config, expanded=False)
        if run.get("reference_program"):
            st.markdown(f"**Reference program** (for `{run.get('reference_target') or 'another target'}`)")
            st.html(to_html(run["reference_program"], "python"))
