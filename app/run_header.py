"""The run view's header: the problem, its status badge, who writes the programs, and the run's actions (Cancel,
Resume where it could change something, the best program, Compare)."""

from __future__ import annotations

import time
from typing import Any

import streamlit as st

from kforge_core.errors import KForgeError

from . import services
from .formatting import fmt_when, run_badge, untrusted
from .navigation import page_path
from .run_state import RunState

LIVE_STATUSES = ("queued", "running")
BUILTIN_LABEL = "built-in, rule-based (no LLM)"


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


def header(run: dict[str, Any], state: RunState, live: bool, pending: bool = False) -> None:
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
            st.info(f"The agent cannot write this problem: {untrusted(run['error'], lines=True)}",
                    icon=":material/block:")
        elif run.get("error") and not live:
            st.error(untrusted(run["error"], lines=True), icon=":material/error:")
        noise = best_noise(run, state) if not live else []
        if noise:
            st.warning("The best's speedups were measured beyond the noise bounds (the machine was busy or the "
                       "timing unstable); re-time before trusting them: " + "; ".join(noise),
                       icon=":material/graphic_eq:")
        stop_reason = (state.finished or {}).get("stop_reason")
        if stop_reason and not live and stop_reason != run.get("error"):
            st.caption(f"Stopped: {untrusted(stop_reason)}")
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


def best_noise(run: dict[str, Any], state: RunState) -> list[str]:
    """The noise warnings of the numbers the best is shown with, as the CLI and the bench say them."""
    index = run.get("best_iteration")
    if index is None:
        return []
    from kforge_core.loop.state import best_noise as noise_of  # the loop's package: loaded once a run has a best

    it = state.iterations.get(index)
    return noise_of(state.contest, index, {"warnings": it.warnings if it else []})


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
