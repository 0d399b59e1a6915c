"""The renderers' registry: one renderer per event kind, shared by live and stored runs.

A renderer draws one event into the current Streamlit container. The run view decides *where* (an iteration's tab,
the activity log, the "writing now" box); the renderer decides *how*. A kind without a renderer is shown as its raw
JSON, so a new event kind from the loop is visible before anyone writes its renderer. The renderers themselves live
in `render_result`, `render_profile`, `render_model_io` and `render_activity` (imported by `app.renderers`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from .run_state import RunState

TABS = ("Program", "Diff", "Result", "Profile", "Analysis", "Model I/O")
EMPTY = {
    "Program": "No program yet.",
    "Diff": "No diff: this is the first program of the run, or the iteration produced none.",
    "Result": "No result yet: the program is still being generated or evaluated.",
    "Profile": "No profile for this iteration (only correct programs are profiled, on targets with a profiler).",
    "Analysis": "No recommendations for this iteration (the analysis agent runs after a profiled, correct program).",
    "Model I/O": "No prompt or model output recorded for this iteration.",
}


# kforge_core.loop.types.STOPPED: the reason's start when the run stopped before the iteration got a program (the
# app reads the store only; importing the loop would pull in the LLM client).
STOPPED = "stopped before a verdict"
TAIL_CHARS = 4000  # how much of a stream the "writing now" box shows


@dataclass
class RenderContext:
    state: RunState
    kernel_language: str = "cpp"
    compact: bool = False  # the one-line form (activity log) or the tail only (writing box)
    builtin: bool = False  # the run's agents are the built-in synthesizer (no model is involved)


def missing_text(error: str | None, builtin: bool) -> str:
    """Why an iteration has no program, naming who wrote none: the built-in synthesizer involves no model."""
    error = error or "no code block found"
    if error.startswith(STOPPED):
        return f"No program: {error}"
    if builtin:
        return f"The built-in synthesizer wrote no program: {error}"
    return f"No program in the model's reply: {error}"


@dataclass(frozen=True)
class Renderer:
    fn: Callable[[dict, RenderContext], None]
    tab: str | None  # the iteration tab it draws into; None: the activity log
    order: int  # position inside the tab (lower first), then seq


RENDERERS: dict[str, Renderer] = {}


def renders(kind: str, tab: str | None = None, order: int = 50):
    def register(fn: Callable[[dict, RenderContext], None]):
        RENDERERS[str(kind)] = Renderer(fn, tab, order)
        return fn
    return register


def render(event: dict, ctx: RenderContext) -> None:
    renderer = RENDERERS.get(event["kind"])
    if renderer is None:
        st.caption(f"{event['kind']} (no renderer yet)")
        st.json(event.get("data") or {}, expanded=False)
        return
    renderer.fn(event, ctx)


def tab_of(event: dict) -> str:
    renderer = RENDERERS.get(event["kind"])
    return renderer.tab if renderer is not None and renderer.tab else "Result"


def order_of(event: dict) -> int:
    renderer = RENDERERS.get(event["kind"])
    return renderer.order if renderer is not None else 99


def _html(fragment: str) -> None:
    st.html(fragment)


def _num(value: Any, fmt: str = "{:.3g}") -> str:
    return "—" if value is None or isinstance(value, str) else fmt.format(value)
