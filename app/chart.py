"""The run's chart: time per iteration against the eager and torch.compile baselines, and the speedups."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .formatting import VERDICT_STYLE

PASS_COLOUR = {"functional": "#1c7ed6", "optimization": "#e8590c"}
EAGER_COLOUR = "#495057"
COMPILED_COLOUR = "#7048e8"


def _hover_ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g} ms"


def figure(points: list[dict[str, Any]], height: int = 360) -> go.Figure:
    """Top: milliseconds per iteration (correct programs), eager and torch.compile as lines. Bottom: speedups, with
    failed iterations marked at 0 so every iteration has a place on the x axis."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.6, 0.4])
    timed = [p for p in points if p["candidate_ms"] is not None and p["status"] in (None, "correct")]
    for pass_name in ("functional", "optimization"):
        mine = [p for p in timed if p["pass_name"] == pass_name]
        if mine:
            fig.add_trace(go.Scatter(
                x=[p["index"] for p in mine], y=[p["candidate_ms"] for p in mine], mode="lines+markers",
                name=f"program ({pass_name})", marker=dict(size=9, color=PASS_COLOUR[pass_name]),
                line=dict(color=PASS_COLOUR[pass_name]),
                hovertemplate="#%{x}: %{y:.4g} ms<extra>" + pass_name + "</extra>"), row=1, col=1)
    for key, name, colour, dash in (("eager_ms", "eager PyTorch", EAGER_COLOUR, "dash"),
                                    ("compiled_ms", "torch.compile", COMPILED_COLOUR, "dot")):
        base = [p for p in points if p[key] is not None]
        if base:
            xs = [p["index"] for p in base]
            ys = [p[key] for p in base]
            if len(xs) == 1:  # one measurement: draw it as a level across the run so far
                xs, ys = [min(p["index"] for p in points), max(p["index"] for p in points)], ys * 2
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, line=dict(color=colour, dash=dash, width=2),
                                     line_shape="hv", hovertemplate="%{y:.4g} ms<extra>" + name + "</extra>"),
                          row=1, col=1)
    with_speedup = [p for p in points if p["speedup_vs_eager"] is not None]
    if with_speedup:
        fig.add_trace(go.Bar(x=[p["index"] for p in with_speedup], y=[p["speedup_vs_eager"] for p in with_speedup],
                             name="speedup vs eager", marker_color="#2f9e44", opacity=0.85,
                             hovertemplate="#%{x}: %{y:.2f}x vs eager<extra></extra>"), row=2, col=1)
    with_compiled = [p for p in points if p["speedup_vs_compiled"] is not None]
    if with_compiled:
        fig.add_trace(go.Scatter(x=[p["index"] for p in with_compiled],
                                 y=[p["speedup_vs_compiled"] for p in with_compiled], mode="markers",
                                 name="speedup vs torch.compile", marker=dict(symbol="diamond", size=9,
                                                                             color=COMPILED_COLOUR),
                                 hovertemplate="#%{x}: %{y:.2f}x vs compile<extra></extra>"), row=2, col=1)
    failed = [p for p in points if p["status"] not in (None, "correct")]
    if failed:
        fig.add_trace(go.Scatter(
            x=[p["index"] for p in failed], y=[0] * len(failed), mode="markers", name="failed",
            marker=dict(symbol="x", size=10, color="#c92a2a"),
            customdata=[[VERDICT_STYLE.get(p["status"], (p["status"],))[0], (p["reason"] or "")[:90]] for p in failed],
            hovertemplate="#%{x}: %{customdata[0]}<br>%{customdata[1]}<extra></extra>"), row=2, col=1)
    fig.add_hline(y=1.0, line=dict(color="#adb5bd", width=1, dash="dot"), row=2, col=1)
    indexes = [p["index"] for p in points] or [0]
    fig.update_xaxes(title_text="iteration", row=2, col=1, dtick=1, range=[min(indexes) - 0.5, max(indexes) + 0.5])
    times = [p[k] for p in points for k in ("candidate_ms", "eager_ms", "compiled_ms") if p[k]]
    if times and max(times) / min(times) > 20:  # a kernel 40x faster than eager is a dot on the floor otherwise
        fig.update_yaxes(title_text="ms per forward (log)", type="log", row=1, col=1)
    else:
        fig.update_yaxes(title_text="ms per forward", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="speedup (×)", row=2, col=1, rangemode="tozero")
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h", y=-0.18),
                      hovermode="closest", bargap=0.5)
    return fig
