"""The Synthesize form's gallery picker: problems grouped by level, each marked with what the built-in synthesizer
covers of it on the chosen target (worked out in a child job, kept on disk: app.gallery_coverage), and the sizes
the chosen target will use.
"""

from __future__ import annotations

import ast
from typing import Any

import streamlit as st

from kforge_core.gallery import GalleryProblem, list_problems
from kforge_core.pyast import parse_ast

from . import gallery_coverage, services
from .highlight import to_html

GALLERY_LEVELS_HELP = ("Level 1: single operators; level 2: a matrix product or convolution with elementwise "
                       "epilogues (fusion problems); level 3: small blocks of several layers.")
SURVEY_POLL_S = 3.0
COVERAGE_TIMEOUT_S = 900.0  # a level's problems traced once on a loaded 2-core box


def cpu_sizes(source: str) -> dict[str, Any]:
    """A gallery module's `CPU_SIZES` literal (the sizes the CPU target uses), read statically; {} if none."""
    try:
        tree = parse_ast(source)
    except SyntaxError:
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CPU_SIZES" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return value if isinstance(value, dict) else {}
    return {}


def chosen_target() -> services.TargetInfo | None:
    """The target the form's target section holds (drawn after this one: its value from the session), else the
    first available one, as that section defaults to."""
    available = [t for t in services.targets() if t.available]
    picked = st.session_state.get("kf-target")
    return next((t for t in available if t.name == picked), available[0] if available else None)


def sizes_text(source: str, target: services.TargetInfo | None) -> str:
    """Which sizes a run on `target` uses for this problem (with the form's "auto" problem sizes)."""
    sizes = cpu_sizes(source)
    own = "the file's own sizes (see the source)"
    if target is None:
        return "Sizes: no target is available here."
    if target.device_type == "cpu" and sizes:
        return (f"Sizes on {target.title}: its `CPU_SIZES`, " + ", ".join(f"{k}={v}" for k, v in sizes.items())
                + f" (problem sizes \"auto\"); GPU targets use {own}.")
    return f"Sizes on {target.title}: {own}" + ("; the CPU target uses its smaller `CPU_SIZES`." if sizes else ".")


def _start_survey(target: str, level: int):
    """Work out a level's coverage on `target` once per server process, in the background (a child job that
    skips what is on disk already); returns its future."""
    @st.cache_resource(show_spinner=False)
    def _future(name: str, lv: int):
        from concurrent.futures import ThreadPoolExecutor

        from .child import run_job

        return ThreadPoolExecutor(1, thread_name_prefix=f"kforge-coverage-{name}-{lv}").submit(
            run_job, "coverage", {"target": name, "level": lv}, COVERAGE_TIMEOUT_S)

    return _future(target, level)


def _redraw_when_done(future) -> None:
    """While the survey runs, look every few seconds; once it is done redraw the page so the marks appear."""
    if future.done():
        st.rerun(scope="app")


def mark(problem: GalleryProblem, target: str | None) -> str:
    answer = gallery_coverage.read(problem.source, target) if target else None
    return gallery_coverage.STATUS_MARK[answer["status"]] + " " if answer else ""


def gallery_section() -> tuple[str, str | None]:
    """(source, name) of the picked gallery problem; ("", None) when the gallery is empty."""
    gallery = list_problems()
    if not gallery:
        st.warning("The gallery is empty (assets/problems/ is missing).")
        return "", None
    target = chosen_target()
    levels = sorted({p.level for p in gallery})
    level = st.segmented_control("Level", levels, default=levels[0], required=True, key="kf-gallery-level",
                                 persist_state="session", format_func=lambda lv: f"Level {lv} "
                                 f"({sum(p.level == lv for p in gallery)})",
                                 help=GALLERY_LEVELS_HELP)
    by_name = {p.name: p for p in gallery if p.level == level}
    survey = _start_survey(target.name, level) if target is not None else None
    marks = {n: mark(p, target.name if target else None) for n, p in by_name.items()}

    def describe(n: str) -> str:
        p = by_name[n]
        return marks[n] + p.title + (f" — {p.description}" if p.description else "")

    picked = st.selectbox("Gallery problem", list(by_name), key=f"kf-gallery:{level}", persist_state="session",
                          format_func=describe,
                          help="✓ the built-in synthesizer covers it, ◐ partly (some nodes stay in PyTorch), "
                               "✗ it writes no program; no mark: still being worked out")
    problem = by_name[picked]
    source = problem.source
    if target is not None:
        failed = survey.exception() if survey is not None and survey.done() else None
        st.caption(coverage_text(problem, target, marks) if failed is None else
                   f"Could not work out what the built-in synthesizer covers here: {failed}")
        if survey is not None and not survey.done():
            st.fragment(_redraw_when_done, run_every=SURVEY_POLL_S)(survey)
    st.caption(sizes_text(source, target))
    with st.expander("Source"):
        st.html(to_html(source, "python"))
    return source, picked.replace("/", "_")


def coverage_text(problem: GalleryProblem, target: services.TargetInfo, marks: dict[str, str]) -> str:
    answer = gallery_coverage.read(problem.source, target.name)
    known = [m for m in marks.values() if m]
    tally = (f" Level: {sum(m.startswith('✓') for m in known)} covered, {sum(m.startswith('◐') for m in known)} "
             f"partly, {sum(m.startswith('✗') for m in known)} not, of {len(marks)}"
             + (f" ({len(marks) - len(known)} still being worked out)" if len(known) < len(marks) else "") + ".")
    if answer is None:
        return (f"Built-in synthesizer on {target.title}: still being worked out for this problem (traced in a "
                f"separate process, once; the marks appear when it is done).{tally}")
    what = gallery_coverage.STATUS_TEXT[answer["status"]]
    return f"Built-in synthesizer on {target.title}: {what} — {answer['text']}.{tally}"
