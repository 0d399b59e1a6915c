"""One renderer per event kind, shared by live and stored runs: the registry (`render_registry`) with every
renderer registered. Import from here: importing this module is what registers them.

The renderers, by where they draw: `render_result` (Program, Diff, Result tabs), `render_profile` (Profile,
Analysis), `render_model_io` (Model I/O), `render_activity` (the activity log).
"""

from __future__ import annotations

from . import render_activity, render_model_io, render_profile, render_result  # noqa: F401 - they register
from .render_profile import kernel_ops, work_text
from .render_registry import (EMPTY, RENDERERS, STOPPED, TABS, TAIL_CHARS, RenderContext, Renderer, missing_text,
                              order_of, render, renders, tab_of)
from .render_result import launches_text

__all__ = ["EMPTY", "RENDERERS", "STOPPED", "TABS", "TAIL_CHARS", "RenderContext", "Renderer", "kernel_ops",
           "launches_text", "missing_text", "order_of", "render", "renders", "tab_of", "work_text"]
