"""The Synthesize form's budgets, evaluation settings, optional cross-platform reference program and profiler
screenshots: what a run may spend and how its programs are judged."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import streamlit as st

from kforge_core.eval.tolerance import POLICIES
from kforge_core.llm import sniff_image_type
from kforge_core.pyast import parse_ast

from . import services
from .form_agents import AgentChoice
from .form_problem import ProblemChoice


def budget_section() -> dict[str, Any]:
    st.markdown("##### 4 · Budgets")
    c = st.columns(6)
    values = dict(
        max_functional_iters=c[0].number_input("Functional iterations", 1, 100, 5, key="kf-func-iters",
                                               persist_state="session",
                                               help="attempts to get a correct program"),
        max_optimization_iters=c[1].number_input("Optimization iterations", 0, 200, 5, key="kf-opt-iters",
                                                 persist_state="session",
                                                 help="attempts to make the correct program faster"),
        patience=c[2].number_input("Patience", 1, 50, 3, key="kf-patience", persist_state="session",
                                   help="stop optimizing after this many iterations without a new best"),
        best_of_k=c[3].number_input("Best of k", 1, 16, 1, key="kf-best-of-k", persist_state="session",
                                    help="programs generated per step; the best one is kept"),
    )
    minutes = c[4].number_input("Time limit (min)", 0, 24 * 60, 0, key="kf-wall-min", persist_state="session",
                                help="0 = no limit")
    tokens = c[5].number_input("Token limit", 0, 100_000_000, 0, step=10_000, key="kf-token-limit",
                               persist_state="session", help="prompt + completion tokens; 0 = no limit")
    values["max_wall_s"] = float(minutes * 60) if minutes else None
    values["max_total_tokens"] = int(tokens) if tokens else None
    st.caption(budget_text(values))
    return values


def budget_text(values: dict[str, Any]) -> str:
    """The budgets in words, with "no limit" where a 0 means none."""
    k = values["best_of_k"]
    steps = values["max_functional_iters"] + values["max_optimization_iters"]
    per_step = f" × {k} programs a step" if k > 1 else ""
    wall = values["max_wall_s"]
    tokens = values["max_total_tokens"]
    return (f"At most {steps * k} iterations ({values['max_functional_iters']} functional + "
            f"{values['max_optimization_iters']} optimization steps{per_step}); time: "
            f"{'no limit' if not wall else f'{wall / 60:g} min'}; "
            f"tokens: {'no limit' if not tokens else f'{tokens:,}'}.")


def advanced_section(choice: ProblemChoice | None, target: services.TargetInfo | None) -> dict[str, Any]:
    with st.expander("Evaluation settings"):
        c = st.columns(4)
        tolerance = c[0].selectbox("Tolerance policy", list(POLICIES), key="kf-tolerance", persist_state="session",
                                   help="see Settings → Tolerances")
        sizes = c[1].selectbox("Problem sizes", ["auto", "file's own sizes", "CPU sizes (CPU_SIZES)"],
                               key="kf-sizes", persist_state="session",
                               help="auto: a gallery problem's CPU_SIZES on a CPU target, the file's sizes elsewhere")
        timeout = c[2].number_input("Evaluation timeout (s)", 10, 3600, 300, key="kf-eval-timeout",
                                    persist_state="session")
        baselines = c[3].toggle("Time eager and torch.compile", value=True, key="kf-baselines",
                                persist_state="session",
                                help="the baselines every speedup is measured against")
        t = st.columns(3)
        min_trials = t[0].number_input("Min timed trials", 3, 1000, 10, key="kf-min-trials", persist_state="session")
        budget_s = t[1].number_input("Timing budget (s)", 0.1, 120.0, None, key="kf-timing-budget",
                                     persist_state="session", placeholder="the target's own",
                                     help="wall time for the timed trials once the minimum is done, unless every "
                                          "median settles sooner; empty: the target's own (2 s, 1 s on the CPU)")
    size_class: str | None = None
    cpu_ok = bool(choice and choice.has_cpu_sizes)
    if sizes == "CPU sizes (CPU_SIZES)":
        if cpu_ok:
            size_class = "cpu"
        elif choice is not None and choice.problem is not None:
            st.warning("This module has no CPU_SIZES dict, so its own sizes are used.", icon=":material/warning:")
    elif sizes == "auto" and cpu_ok and target is not None and target.device_type == "cpu":
        size_class = "cpu"
    return dict(tolerance=tolerance, size_class=size_class, eval_timeout_s=float(timeout),
                eval_baselines=bool(baselines),
                eval_timing_options={"min_trials": int(min_trials),
                                     **({"budget_s": float(budget_s)} if budget_s is not None else {})})


def reference_section() -> tuple[str | None, str | None, str | None]:
    """(program, its target, error) for the optional cross-platform reference."""
    with st.expander("Cross-platform reference program (optional)"):
        st.caption("A program that already works on another target (say CUDA) gives the agents a head start on "
                   "this one (say Metal).")
        mode = st.segmented_control("Reference", ["None", "Paste", "Upload", "From a stored run"], default="None",
                                    required=True, key="kf-ref-mode", label_visibility="collapsed")
        if mode == "None":
            return None, None, None
        names = [t.name for t in services.targets()]
        titles = {t.name: t.title for t in services.targets()}
        if mode == "From a stored run":
            with services.store() as s:
                runs = [r for r in s.list_runs(limit=200) if r.get("best_iteration") is not None]
            if not runs:
                st.info("No stored run has a correct program yet.")
                return None, None, None
            by_id = {r["id"]: r for r in runs}
            run_id = st.selectbox("Run", list(by_id), key="kf-ref-run", format_func=lambda i: (
                f"{by_id[i]['problem_name']} on {by_id[i]['target']} — best #{by_id[i]['best_iteration']} "
                f"({(by_id[i].get('best_speedup_vs_eager') or 0):.2f}x) · {i}"))
            run = by_id[run_id]
            with services.store() as s:
                code = s.get_iteration(run_id, run["best_iteration"]).get("code")
            st.caption(f"Its best program, for target `{run['target']}`.")
            return code, run["target"], None if code else "that iteration has no stored program"
        if mode == "Paste":
            code = st.text_area("Reference program (a ModelNew module)", height=200, key="kf-ref-paste")
        else:
            upload = st.file_uploader("Reference program (.py)", type=["py"], key="kf-ref-upload")
            try:
                code = upload.getvalue().decode("utf-8") if upload is not None else ""
            except UnicodeDecodeError:
                return None, None, "the reference program is not a UTF-8 text file"
        ref_target = st.selectbox("It was written for", names, key="kf-ref-target", format_func=titles.get)
        if not code.strip():
            return None, None, None
        try:
            parse_ast(code)
        except SyntaxError as exc:
            return None, None, f"the reference program does not parse: line {exc.lineno}: {exc.msg}"
        return code, ref_target, None


def screenshots_section(agent: AgentChoice, target: services.TargetInfo | None) -> tuple[list[tuple[str, bytes]],
                                                                                          str | None]:
    """([(file name, bytes)], error) of profiler screenshots for the analysis agent."""
    with st.expander("Profiler screenshots for the analysis agent (optional)"):
        st.caption("PNG or JPEG captures of a GUI profiler (Nsight Compute, Xcode Instruments…). They are saved "
                   "with the run and sent to the analysis agent, which needs a vision-capable model.")
        disabled = agent.agent != "llm"
        if disabled:
            st.caption(":gray[The built-in synthesizer reads no images; choose LLM agents to send screenshots.]")
        uploads = st.file_uploader("Screenshots", type=["png", "jpg", "jpeg"], accept_multiple_files=True,
                                   key="kf-screenshots", disabled=disabled)
    shots = []
    for up in uploads or []:
        data = up.getvalue()
        if sniff_image_type(data) is None:
            return [], f"{up.name} is not a PNG or JPEG image"
        shots.append((up.name, data))
    return shots, None


def save_screenshots(shots: list[tuple[str, bytes]]) -> list[str]:
    """Write the screenshots into a fresh folder under the store's files folder; return their paths."""
    if not shots:
        return []
    folder = services.files_dir() / f"screenshots-{secrets.token_hex(6)}"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, (name, data) in enumerate(shots):
        safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in Path(name).name)[:80]
        path = folder / f"{n:02d}_{safe}"
        path.write_bytes(data)
        paths.append(str(path))
    return paths
