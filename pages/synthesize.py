"""Synthesize: paste a module, pick a target and the agents, start a run and watch every iteration live.

With `?run=<id>` in the URL the page shows that run instead of the form (a reload or a shared link re-attaches).
"""

from __future__ import annotations

import streamlit as st

from app import run_view, services
from app import synthesize_form as form
from app.child import ChildJobError
from app.formatting import fmt_when
from app.navigation import page_path
from kforge_core.errors import KForgeError


def _new_synthesis() -> None:
    st.query_params.pop("run", None)


def _live_runs() -> None:
    """Runs still going (from this tab or any other): one click re-attaches."""
    try:
        with services.store() as s:
            live = s.list_runs(status=["queued", "running"], limit=10)
    except KForgeError as exc:
        st.error(f"Could not read the run store: {exc}", icon=":material/database:")
        return
    if not live:
        return
    with st.container(border=True):
        st.markdown("**Running now**")
        for run in live:
            st.page_link(page_path("synthesize"),
                         label=f"{run['problem_name']} on {run['target']} · started {fmt_when(run['created_at'])}",
                         icon=":material/progress_activity:", query_params={"run": run["id"]})


run_id = st.query_params.get("run")
if run_id:
    st.button("New synthesis", icon=":material/add:", on_click=_new_synthesis, key="kf-new")
    run_view.show(run_id)
    st.stop()

st.title("Synthesize a kernel")
st.caption("Paste a PyTorch module, choose where it should run fast, and watch the agents write, test and time "
           "custom kernels. Runs continue in the background if you close the tab.")
_live_runs()

left, right = st.columns([3, 2], gap="large")
with left:
    choice = form.problem_section()
with right:
    target = form.target_section()
    agent = form.agent_section()
budgets = form.budget_section()
evaluation = form.advanced_section(choice, target)
blocker = None
if choice is not None and choice.problem is not None:
    blocker = form.reference_check(choice, target, evaluation["size_class"], builtin=agent.agent == "builtin")
ref_program, ref_target, ref_error = form.reference_section()
shots, shots_error = form.screenshots_section(agent, target)

loop = services.loop_module()
problems = []
if choice is None or choice.problem is None:
    problems.append("a usable module")
if target is None:
    problems.append("an available target")
if agent.agent == "llm" and not agent.model:
    problems.append("a generation model")
if blocker:
    problems.append(blocker)
for error in (ref_error, shots_error):
    if error:
        st.error(error, icon=":material/error:")
if loop is None:
    st.warning("The synthesis loop (kforge_core.loop) is not installed in this checkout yet, so runs cannot start. "
               "Stored runs can still be opened from the Runs page.", icon=":material/construction:")

ready = not problems and not ref_error and not shots_error and loop is not None
if problems:
    st.caption("To start, the form needs " + ", ".join(problems) + ".")
if st.button("Start synthesis", type="primary", icon=":material/rocket_launch:", disabled=not ready,
             key="kf-start"):
    if agent.agent == "llm" and not form.show_endpoint_check(agent, test_call=False):
        st.stop()
    try:
        config = form.build_config(
            loop, problem_source=choice.problem.source, problem_name=choice.problem.name, target=target.name,
            agent=agent.agent, model=agent.model, analysis_model=agent.analysis_model, base_url=agent.base_url,
            api_key=agent.api_key, reference_program=ref_program, reference_target=ref_target,
            screenshots=form.save_screenshots(shots), **budgets, **evaluation)
        with st.spinner("Starting the run…"):
            new_id = form.start_run(config)
    except (KForgeError, ChildJobError, OSError, TypeError, ValueError) as exc:
        st.error(f"Could not start the run: {exc}", icon=":material/error:")
        st.stop()
    st.query_params["run"] = new_id
    st.rerun()
