"""Workbench: write or edit a candidate program in a code editor, evaluate it with the loop's own evaluator, read
the verdict, timings, profile and roofline beside it (errors marked at the program's lines), keep a history of
versions with diffs, ask the analyst, and hand the program to the agents.

The editor's text is untrusted: this page only holds it as a string and passes it to a child job, which starts a
detached worker whose sandboxed evaluator judges it. Each evaluation is a version of a manual run in the store
(Runs and Compare list it); the page polls the store while a job runs, as the run view does.
`?run=<id>&iteration=<n>` opens that iteration's program (the run view's and Compare's "Edit in Workbench").
"""

from __future__ import annotations

import time

import streamlit as st
from code_editor import code_editor

from app import run_view, services
from app import synthesize_form as form
from app import workbench as wb
from app.child import ChildJobError
from app.formatting import fmt_ms, fmt_x, verdict_icon
from app.highlight import side_by_side_diff
from app.navigation import page_path
from app.renderers import RenderContext, render
from kforge_core.errors import KForgeError
from kforge_core.gallery import list_problems

PENDING_S = 120.0  # how long a job may take to show up in the store before the page stops waiting for it
EDITOR_HEIGHT = [24, 40]  # lines: the editor grows with the program between these


def _state(key: str, default=None):
    return st.session_state.setdefault(f"kf-wb-{key}", default)


def _set(key: str, value) -> None:
    st.session_state[f"kf-wb-{key}"] = value


def load_program(code: str) -> None:
    """Put `code` in the editor: a new editor key remounts it with that text."""
    _set("code", code)
    _set("text", code)
    _set("editor", _state("editor", 0) + 1)


# --------------------------------------------------------------------------------------------------- opening

def _open_from_query(available: dict[str, services.TargetInfo]) -> None:
    run_id, index = st.query_params.get("run"), st.query_params.get("iteration")
    if not run_id or _state("opened") == (run_id, index):
        return
    _set("opened", (run_id, index))
    try:
        with services.store() as s:
            run = s.get_run(run_id)
            rows = [r for r in s.iterations(run_id) if r.get("code")]
    except KForgeError as exc:
        st.error(f"Could not open run `{run_id}`: {exc}", icon=":material/error:")
        return
    row = next((r for r in rows if str(r["index"]) == str(index)), rows[-1] if rows else None)
    if row is None:
        st.warning(f"Run `{run_id}` has no program yet.", icon=":material/code_off:")
        return
    load_program(row["code"])
    st.session_state["kf-wb-problem"] = run["problem_source"]
    st.session_state["kf-wb-problem-name"] = run["problem_name"]
    if run["target"] in available:
        st.session_state["kf-wb-target"] = run["target"]
    if run.get("kind") == "manual":  # go on with the same manual run, as its author (another name starts a new one)
        _set("run", run_id)
        st.session_state["kf-wb-author"] = run.get("author") or ""
    _set("from", f"{run['problem_name']} #{row['index']} (run `{run_id}`)")


def _open_buttons(target: services.TargetInfo | None) -> None:
    with st.container(horizontal=True, gap="small"):
        example = wb.example_texts(target) if target else None
        if st.button("Target's example", icon=":material/lightbulb:", key="kf-wb-example", disabled=example is None,
                     help="the single-shot example the agents are shown: its problem and its program"):
            st.session_state["kf-wb-problem"], code = example
            st.session_state["kf-wb-problem-name"] = f"{target.name}_example"
            load_program(code)
            _set("from", f"{target.title}'s example")
        if st.button("Blank template", icon=":material/note_add:", key="kf-wb-blank", disabled=target is None,
                     help="the target's compile helper and an empty ModelNew"):
            load_program(wb.blank_template(target))
            _set("from", f"a blank template for {target.title}")
        with st.popover("Upload a file", icon=":material/upload_file:"):
            upload = st.file_uploader("A candidate program (.py)", type=["py"], key="kf-wb-upload")
            if upload is not None and _state("uploaded") != upload.file_id:
                _set("uploaded", upload.file_id)
                try:
                    load_program(upload.getvalue().decode("utf-8"))
                    _set("from", upload.name)
                    st.rerun()
                except UnicodeDecodeError:
                    st.error(f"{upload.name} is not a UTF-8 text file.", icon=":material/error:")


def _problem_section() -> form.ProblemChoice | None:
    st.markdown("**The problem** (the PyTorch reference the program must match)")
    with st.popover("From the gallery", icon=":material/collections_bookmark:"):
        gallery = {p.name: p for p in list_problems()}
        name = st.selectbox("Gallery problem", list(gallery), key="kf-wb-gallery", index=None,
                            format_func=lambda n: gallery[n].title)
        if name and st.button("Use it", key="kf-wb-gallery-use"):
            st.session_state["kf-wb-problem"] = gallery[name].source
            st.session_state["kf-wb-problem-name"] = name.replace("/", "_")
            st.rerun()
    source = st.text_area("Problem source", key="kf-wb-problem", height=260, label_visibility="collapsed",
                          placeholder=form.PLACEHOLDER)
    name = st.text_input("Problem name", key="kf-wb-problem-name", placeholder="e.g. relu_times_two")
    if not source.strip():
        st.caption("Paste a KernelBench-format module, pick one from the gallery, or open the target's example.")
        return None
    choice = form.check_problem(source, name.strip() or None)
    if choice.problem is None:
        st.error(f"This problem cannot be used: {choice.error}", icon=":material/error:")
    return choice


# --------------------------------------------------------------------------------------------------- the run

def _finished_count(run_id: str) -> int:
    with services.store() as s:
        return len(s.events(run_id, kinds=["run_finished"]))


def _pending(run_id: str | None, status: str | None) -> bool:
    """A job asked for and not yet done: the worker takes seconds to start, and a poll in between must not
    read the run's old status as the answer."""
    pending = _state("pending")
    if not pending or pending["run"] != run_id:
        return False
    if _finished_count(run_id) > pending["finished"]:
        _set("pending", None)
        return False
    if status not in run_view.LIVE_STATUSES and time.monotonic() - pending["since"] > PENDING_S:
        _set("pending", None)
        st.warning("The evaluation's worker did not start; see the worker log next to the run store.",
                   icon=":material/warning:")
        return False
    return True


def _launch(job: str, program: str, choice: form.ProblemChoice, target: services.TargetInfo, author: str,
            evaluation: dict, of: int | None = None) -> None:
    run_id = _state("run")
    try:
        before = _finished_count(run_id) if run_id else 0
        with st.spinner("Handing the program to the evaluator…" if job == "evaluate" else "Asking the analyst…"):
            run_id = wb.manual_job(job, program, run_id=run_id, problem_source=choice.problem.source,
                                   problem_name=choice.problem.name, target=target.name, author=author,
                                   evaluation=evaluation, of=of)
    except (ChildJobError, KForgeError, OSError) as exc:
        st.error(f"Could not start: {exc}", icon=":material/error:")
        return
    _set("run", run_id)
    _set("pending", {"run": run_id, "finished": before, "since": time.monotonic()})
    st.rerun()


def _versions(run_id: str) -> list[dict]:
    with services.store() as s:
        return [r for r in s.iterations(run_id) if r.get("code") and r["finished_at"] is not None]


def _result_panel(run_id: str, was_live: bool) -> None:
    """The newest version's verdict (stages while it runs), with the run view's tabs; polls while a job runs."""
    try:
        run, state = run_view.poll(run_id)
    except KForgeError as exc:
        st.error(f"Could not read the run store: {exc}", icon=":material/database:")
        return
    live = run["status"] in run_view.LIVE_STATUSES or _pending(run_id, run["status"])
    if not state.iterations:
        st.info("Evaluating… the stages appear here as the evaluator reaches them." if live else
                "No version evaluated yet.", icon=":material/hourglass_top:")
    else:
        newest = max(state.iterations)
        it = state.iterations[newest]
        if live and not it.finished:
            st.markdown(f":blue[:material/progress_activity:] **Evaluating version #{newest}** · "
                        f"{it.stage or 'starting the evaluation'}…")
        elif live:
            st.markdown(":blue[:material/progress_activity:] **The analyst is reading the program…**")
        info = services.target_info(run["target"], wait=False)
        ctx = RenderContext(state=state, kernel_language=info.kernel_language if info else "cpp")
        run_view.iteration_detail(run, state, newest, ctx, editable=False, default_tab="Result")
        _analyst_answer(state, ctx)
    if was_live and not live:
        st.rerun(scope="app")  # the editor picks up the new markers; polling stops


def _analyst_answer(state, ctx: RenderContext) -> None:
    answers = [e for it in state.iterations.values() for e in it.events if e["kind"] == "recommendations"]
    if not answers:
        return
    newest = max(answers, key=lambda e: e["seq"])
    with st.container(border=True, key="kf-wb-analyst"):
        st.markdown(f"**The analyst on version #{newest['iteration']}**")
        render(newest, ctx)


def _history(run_id: str, versions: list[dict]) -> None:
    st.markdown("**Versions** (each evaluation is kept; Runs and Compare list them)")
    st.dataframe([{"version": f"#{v['index']}", "verdict": f"{verdict_icon(v['status'])} {v['status']}",
                   "time": fmt_ms(v.get("candidate_ms")), "vs eager": fmt_x(v.get("speedup_vs_eager")),
                   "vs torch.compile": fmt_x(v.get("speedup_vs_compiled"))} for v in reversed(versions)],
                 hide_index=True, width="stretch")
    indexes = [v["index"] for v in versions]
    by_index = {v["index"]: v for v in versions}
    c1, c2, c3 = st.columns([2, 2, 1.4], vertical_alignment="bottom")
    old = c1.selectbox("From", indexes, index=max(0, len(indexes) - 2), key=f"kf-wb-diff-a:{run_id}",
                       format_func=lambda i: f"#{i} · {by_index[i]['status']}")
    new = c2.selectbox("To", indexes, index=len(indexes) - 1, key=f"kf-wb-diff-b:{run_id}",
                       format_func=lambda i: f"#{i} · {by_index[i]['status']}")
    if c3.button("Open “From” in the editor", key="kf-wb-open-version", icon=":material/edit:"):
        load_program(by_index[old]["code"])
        _set("from", f"version #{old}")
        st.rerun()
    if by_index[old]["code"] == by_index[new]["code"]:
        st.caption("The two versions are identical." if old != new else "Pick two versions to see their diff.")
    else:
        st.html(side_by_side_diff(by_index[old]["code"], by_index[new]["code"]))
    st.page_link(page_path("compare"), label="Open in Compare", icon=":material/compare_arrows:",
                 query_params={"a": f"{run_id}:{new}", "b": f"{run_id}:{old}"})


# --------------------------------------------------------------------------------------------------- the page

st.title("Workbench")
st.caption("Write or edit a kernel program, evaluate it with the same sandboxed evaluator as the agents' loop, and "
           "read its verdict, timings and profile beside it. The program never runs in this app's process.")

targets = services.targets()
available = {t.name: t for t in targets if t.available}
_open_from_query(available)

head = st.columns([2, 2, 3], vertical_alignment="bottom")
target_name = head[0].selectbox("Target", list(available), key="kf-wb-target",
                                format_func=lambda n: available[n].title) if available else None
target = available.get(target_name) if target_name else None
if not available:
    head[0].error("No target is available on this machine.", icon=":material/error:")
st.session_state.setdefault("kf-wb-author", wb.default_author())
author = head[1].text_input("Author", key="kf-wb-author",
                            help="stored with every version you evaluate (a manual run)").strip()
with head[2]:
    _open_buttons(target)

left, right = st.columns([3, 2], gap="medium")
with right:
    choice = _problem_section()
    evaluation = form.advanced_section(choice, target)

run_id = _state("run")
run = None
if run_id:
    try:
        with services.store() as s:
            run = s.get_run(run_id)
    except KForgeError:
        run_id = None
# a manual run belongs to one problem, target and author: another one starts a new run at the next evaluation
if run is not None and choice is not None and choice.problem is not None and (
        run["problem_source"] != choice.problem.source or run["target"] != target_name or run["author"] != author):
    _set("run", None)
    run_id, run = None, None
versions = _versions(run_id) if run_id else []
live = run is not None and (run["status"] in run_view.LIVE_STATUSES or _pending(run_id, run["status"]))
last = versions[-1] if versions else None
found = wb.annotations(last.get("verdict"), last.get("reason")) if last and last["status"] != "correct" else []

with left:
    origin = _state("from")
    st.markdown("**Program** (a `ModelNew` module)" + (f" · opened from {origin}" if origin else ""))
    if _state("code") is None:
        load_program(wb.blank_template(target) if target else "")
    response = code_editor(_state("code"), lang="python", height=EDITOR_HEIGHT, response_mode=["debounce", "blur"],
                           props={"annotations": found, "showPrintMargin": False},
                           options={"showLineNumbers": True, "tabSize": 4, "useSoftTabs": True},
                           key=f"kf-wb-editor-{_state('editor')}")
    if response and response.get("type"):
        _set("text", response["text"])
    program = _state("text") or ""
    if found:
        lines = ", ".join(str(a["row"] + 1) for a in found)
        st.caption(f":red[:material/error:] version #{last['index']}: marked at line{'s' if len(found) > 1 else ''} "
                   f"{lines} (hover the marker for the message)")
    ready = choice is not None and choice.problem is not None and target is not None and bool(author)
    need = [what for what, ok in (("a usable problem", choice is not None and choice.problem is not None),
                                  ("a target", target is not None), ("an author", bool(author)),
                                  ("a program", bool(program.strip()))) if not ok]
    with st.container(horizontal=True, gap="small"):
        if st.button("Evaluate", type="primary", icon=":material/play_arrow:", key="kf-wb-evaluate",
                     disabled=bool(need) or live, help="judge this program in a sandboxed worker (Ctrl+Enter "
                                                      "in the editor sends the text first)"):
            _launch("evaluate", program, choice, target, author, evaluation)
        if st.button("Ask the analyst", icon=":material/psychology:", key="kf-wb-analyst-btn",
                     disabled=bool(need) or live or last is None,
                     help="the built-in analysis agent reads this program and the last evaluated version's profile "
                          "and timings" if last else "evaluate a version first: the analyst reads its profile"):
            _launch("analyse", program, choice, target, author, evaluation, of=last["index"])
        stem = choice.problem.name if choice is not None and choice.problem is not None else "program"
        st.download_button("Download", program, file_name=f"{stem}_new.py",
                           mime="text/x-python", icon=":material/download:", on_click="ignore", key="kf-wb-dl",
                           disabled=not program.strip())
    if need:
        st.caption("To evaluate, the Workbench needs " + ", ".join(need) + ".")

st.divider()
if run_id:
    if live:
        st.html(f"<style>{run_view.NO_STALE_FADE_CSS}</style>")
    st.markdown(f"#### Result · manual run `{run_id}`")
    st.fragment(_result_panel, run_every=services.POLL_INTERVAL_S if live else None)(run_id, live)
    if versions:
        with st.expander(f"History: {len(versions)} version{'s' if len(versions) != 1 else ''}", expanded=False):
            _history(run_id, versions)
else:
    st.caption("Evaluate the program to see its verdict here: the stages as they go, then the verdict, timings "
               "against eager PyTorch and torch.compile, the custom-kernel share, the profile and the roofline.")

with st.expander("Continue with the agents", expanded=False, icon=":material/smart_toy:"):
    st.caption("Start a synthesis run from this program: when it is correct the optimization pass starts from it, "
               "when it is not the functional pass fixes it first. The run shows in the usual live view.")
    agent = form.agent_section()
    c1, c2 = st.columns(2)
    budgets = dict(max_functional_iters=int(c1.number_input("Functional iterations", 1, 100, 3, key="kf-wb-func")),
                   max_optimization_iters=int(c2.number_input("Optimization iterations", 0, 200, 3,
                                                              key="kf-wb-opt")))
    loop = services.loop_module()
    if st.button("Continue with the agents", icon=":material/rocket_launch:", key="kf-wb-continue",
                 disabled=bool(need) or loop is None or (agent.agent == "llm" and not agent.model)):
        try:
            config = wb.continue_config(loop, program, choice.problem.source, choice.problem.name, target.name,
                                        agent, budgets, evaluation)
            with st.spinner("Starting the run…"):
                new_id = form.start_run(config)
        except (KForgeError, ChildJobError, OSError, TypeError, ValueError) as exc:
            st.error(f"Could not start the run: {exc}", icon=":material/error:")
            st.stop()
        st.switch_page(page_path("synthesize"), query_params={"run": new_id})
