"""The Synthesize form's first section: the PyTorch module (pasted, from the gallery, uploaded), checked statically
here, and the optional check that runs its reference once in an evaluation child (never in this process).

A module that does not parse or lacks `Model`/`get_inputs`/`get_init_inputs` is reported in place, in one
sentence, with the line.
"""

from __future__ import annotations

import ast
import html
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from kforge_core.errors import ProblemError
from kforge_core.problem import Problem, load_problem
from kforge_core.pyast import parse_ast

from . import services
from .gallery_picker import gallery_section

PLACEHOLDER = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


def get_inputs():
    return [torch.randn(1024, 1024)]


def get_init_inputs():
    return []
'''
VALIDATE_TIMEOUT_S = 120.0


@dataclass
class ProblemChoice:
    problem: Problem | None
    error: str | None = None
    error_line: int | None = None
    has_cpu_sizes: bool = False


def has_cpu_sizes(source: str) -> bool:
    """Whether the module defines a gallery-style `CPU_SIZES` dict (the "cpu" size class), read statically."""
    try:
        tree = parse_ast(source)
    except SyntaxError:
        return False
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if any(isinstance(t, ast.Name) and t.id == "CPU_SIZES" for t in targets):
            return True
    return False


def check_problem(source: str, name: str | None = None) -> ProblemChoice:
    """The static checks of the foundation (`load_problem`), as a value the page can show."""
    try:
        problem = load_problem(text=source, name=name or None)
    except ProblemError as exc:
        return ProblemChoice(None, str(exc), exc.line)
    return ProblemChoice(problem, has_cpu_sizes=has_cpu_sizes(source))


def _snippet(source: str, line: int, context: int = 2) -> str:
    lines = source.splitlines()
    lo, hi = max(1, line - context), min(len(lines), line + context)
    width = len(str(hi))
    return "\n".join(f"{'>' if n == line else ' '} {n:>{width}} | {lines[n - 1]}" for n in range(lo, hi + 1))



def problem_section() -> ProblemChoice | None:
    st.markdown("##### 1 · The PyTorch module")
    mode = st.segmented_control("Where the module comes from", ["Paste", "Gallery", "Upload"], default="Paste",
                                required=True, key="kf-problem-mode", persist_state="session",
                                label_visibility="collapsed")
    source, name = "", None
    if mode == "Paste":
        st.button("Insert an example", icon=":material/lightbulb:", key="kf-example", on_click=_insert_example,
                  help="the CPU target's single-shot example: swish with a bias")
        source = st.text_area("Paste a KernelBench-format module: `class Model(nn.Module)`, `get_inputs()`, "
                              "`get_init_inputs()`", height=300, key="kf-paste", placeholder=PLACEHOLDER,
                              persist_state="session")
        name = st.text_input("Name (optional)", key="kf-paste-name", persist_state="session",
                             placeholder="e.g. relu_times_two").strip() or None
    elif mode == "Gallery":
        source, name = gallery_section()
        if not source:
            return None
    else:
        upload = st.file_uploader("A .py file with Model, get_inputs and get_init_inputs", type=["py"],
                                  key="kf-upload")
        if upload is None:
            return None
        try:
            source = upload.getvalue().decode("utf-8")
        except UnicodeDecodeError:
            st.error(f"{upload.name} is not a UTF-8 text file.", icon=":material/error:")
            return None
        name = Path(upload.name).stem
    if not source.strip():
        st.caption("Paste a module to begin; it is checked as you go (parsed here, never run in this process).")
        return None
    choice = check_problem(source, name)
    if choice.problem is None:
        st.error(f"This module cannot be used: {choice.error}", icon=":material/error:")
        if choice.error_line:
            st.html(f'<div class="kf-code kf-log"><pre>{_escape(_snippet(source, choice.error_line))}</pre></div>')
    else:
        desc = f" — {choice.problem.description}" if choice.problem.description else ""
        st.success(f"**{choice.problem.name}**: Model, get_inputs and get_init_inputs found{desc}",
                   icon=":material/check_circle:")
    return choice


def _insert_example() -> None:
    from kforge_core.platform import EXAMPLES_DIR

    st.session_state["kf-paste"] = (EXAMPLES_DIR / "cpu" / "problem.py").read_text()
    st.session_state["kf-paste-name"] = "swish_bias"


def _escape(text: str) -> str:
    return html.escape(text)


def reference_check(choice: ProblemChoice, target: services.TargetInfo | None, size_class: str | None,
                    builtin: bool = False) -> str | None:
    """Run the reference once in an evaluation child: inputs, outputs, time, and what only running can tell; with
    the built-in synthesizer chosen, also what it can write for this module. Returns what stands in the way of a
    run ("" when the check passed, None when it was not run): a reference that does not run fails every
    iteration, and so does a module the built-in synthesizer cannot write."""
    if choice.problem is None or target is None or not target.available:
        return None
    key = f"kf-validated:{choice.problem.digest}:{target.name}:{size_class}:{builtin}"
    if st.button("Check by running the reference", icon=":material/play_circle:", key="kf-validate",
                 help="Runs Model on get_inputs() once in a separate process on the chosen target"):
        from .child import ChildJobError, run_job

        with st.spinner(f"Running the reference on {target.title}…"):
            try:
                report = run_job("validate", {"source": choice.problem.source, "name": choice.problem.name,
                                              "target": target.name, "size_class": size_class,
                                              "timeout_s": VALIDATE_TIMEOUT_S, "builtin": builtin},
                                 timeout_s=VALIDATE_TIMEOUT_S * (2 if builtin else 1) + 30)
                st.session_state[key] = ("ok", report)
            except ChildJobError as exc:
                st.session_state[key] = ("error", str(exc))
    result = st.session_state.get(key)
    if result is None:
        if builtin:
            st.caption("The check also says what the built-in synthesizer can write for this module.")
        return None
    kind, value = result
    if kind == "error":
        st.error(f"Running the reference failed: {value}", icon=":material/error:")
        return "a reference that runs (the check by running it failed)"
    ms = f"{value['reference_ms']:.3g} ms per forward" if value.get("reference_ms") is not None else "time unknown"
    st.success(f"The reference runs: inputs {', '.join(value['inputs']) or '—'} → outputs "
               f"{', '.join(value['outputs']) or '—'}; {ms}.", icon=":material/check_circle:")
    for warning in value.get("warnings") or []:
        st.warning(warning, icon=":material/warning:")
    coverage = value.get("builtin") if builtin else None
    if coverage is not None:
        if not coverage.get("ok"):
            st.error(f"The built-in synthesizer cannot write this module: {coverage.get('text')}. Choose an LLM "
                     "endpoint, or a module it covers.", icon=":material/code_off:")
            return "a module the built-in synthesizer can write (or an LLM agent)"
        st.info(f"The built-in synthesizer will write: {coverage.get('text')}.", icon=":material/memory:")
    return ""
