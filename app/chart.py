"""The run's chart: time per iteration against the eager and torch.compile baselines, and the speedups."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .formatting import VERDICT_STYLE

PASS_COLOUR = {"functional": "#1c7ed6", "optimization": "#e8590c"}
EAGER_COLOUR = "#495057"
COMPILED_COLOUR = "#7048e8"
GAIN_COLOUR = "#2f9e44"  # a speedup bar at or above 1x
LOSS_COLOUR = "#e03131"  # below 1x: the program is slower than eager
FAILED_COLOUR = "#c92a2a"
NO_PROGRAM_COLOUR = "#868e96"
# Statuses drawn as "failed" crosses: a judged program that is not correct. An iteration with no program (the
# generator wrote none, or the run stopped first) was never judged, so it is drawn apart, hollow and grey.
NOT_JUDGED = ("no_program", "cancelled")


def _hover_ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g} ms"


def log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks covering [low, high], labelled with their full value: plotly's own minor log ticks read "5"
    for 0.5 and for 50 alike."""
    import math

    ticks = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for mantissa in (1, 2, 5):
            value = mantissa * 10.0 ** exponent
            if low / 2.5 <= value <= high * 2.5:
                ticks.append(float(f"{value:.6g}"))
    return ticks


def _baseline_steps(points: list[dict[str, Any]], key: str, right_edge: float) -> tuple[list, list]:
    """A step line through each measurement of a baseline, held to the right edge of the plot: the newest value is
    a level the eye can read (a step line ends in a vertical tick at the last point otherwise), and a run with a
    single measurement still gets a visible level."""
    measured = [p for p in points if p[key] is not None]
    xs = [p["index"] for p in measured] + [right_edge]
    ys = [p[key] for p in measured] + [measured[-1][key]]
    xs[0] = min(xs[0], measured[0]["index"] - 0.5)
    return xs, ys


def figure(points: list[dict[str, Any]], height: int = 360) -> go.Figure:
    """Top: milliseconds per iteration (correct programs), eager and torch.compile as step lines, each with its
    newest value in the legend. Bottom: speedups vs eager as bars (green at or above 1x, red below), failed
    iterations as red crosses at 0, iterations without a program as hollow grey circles at 0."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.6, 0.4])
    indexes = [p["index"] for p in points] or [0]
    right_edge = max(indexes) + 0.5
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
        if any(p[key] is not None for p in points):
            xs, ys = _baseline_steps(points, key, right_edge)
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"{name} (now {_hover_ms(ys[-1])})",
                                     line=dict(color=colour, dash=dash, width=2), line_shape="hv",
                                     hovertemplate="%{y:.4g} ms<extra>" + name + "</extra>"), row=1, col=1)
    with_speedup = [p for p in points if p["speedup_vs_eager"] is not None]
    if with_speedup:
        values = [p["speedup_vs_eager"] for p in with_speedup]
        fig.add_trace(go.Bar(x=[p["index"] for p in with_speedup], y=values, name="speedup vs eager",
                             marker_color=[GAIN_COLOUR if v >= 1.0 else LOSS_COLOUR for v in values], opacity=0.85,
                             text=[f"{v:.2f}×" for v in values], textposition="outside", cliponaxis=False,
                             hovertemplate="#%{x}: %{y:.2f}x vs eager<extra></extra>"), row=2, col=1)
    with_compiled = [p for p in points if p["speedup_vs_compiled"] is not None]
    if with_compiled:
        fig.add_trace(go.Scatter(x=[p["index"] for p in with_compiled],
                                 y=[p["speedup_vs_compiled"] for p in with_compiled], mode="markers",
                                 name="speedup vs torch.compile", marker=dict(symbol="diamond", size=9,
                                                                             color=COMPILED_COLOUR),
                                 hovertemplate="#%{x}: %{y:.2f}x vs compile<extra></extra>"), row=2, col=1)
    for name, chosen, symbol, colour in (
            ("failed", [p for p in points if p["status"] not in (None, "correct", *NOT_JUDGED)], "x", FAILED_COLOUR),
            ("no program", [p for p in points if p["status"] in NOT_JUDGED], "circle-open", NO_PROGRAM_COLOUR)):
        if chosen:
            fig.add_trace(go.Scatter(
                x=[p["index"] for p in chosen], y=[0] * len(chosen), mode="markers", name=name,
                marker=dict(symbol=symbol, size=10, color=colour, line=dict(width=2, color=colour)),
                customdata=[[VERDICT_STYLE.get(p["status"], (p["status"],))[0], (p["reason"] or "")[:90]]
                            for p in chosen],
                hovertemplate="#%{x}: %{customdata[0]}<br>%{customdata[1]}<extra></extra>"), row=2, col=1)
    fig.add_hline(y=1.0, line=dict(color="#adb5bd", width=1, dash="dot"), row=2, col=1)
    finished = [p for p in points if p.get("finished", True) and p["status"] is not None]
    if finished and not timed:
        judged = [p for p in finished if p["status"] not in NOT_JUDGED]
        text = (f"No correct program: {len(judged)} of {len(finished)} iteration{'s' if len(finished) != 1 else ''} "
                f"judged, none correct" if judged else
                f"No program was written in {len(finished)} iteration{'s' if len(finished) != 1 else ''}")
        fig.add_annotation(text=text, xref="x domain", yref="y domain", x=0.5, y=0.5, showarrow=False,
                           font=dict(size=15, color=FAILED_COLOUR), row=1, col=1)
        fig.update_yaxes(showticklabels=False, row=1, col=1)
    fig.update_xaxes(title_text="iteration", row=2, col=1, dtick=1, range=[min(indexes) - 0.5, right_edge])
    times = [p[k] for p in points for k in ("candidate_ms", "eager_ms", "compiled_ms") if p[k]]
    if times and max(times) / min(times) > 20:  # a kernel 40x faster than eager is a dot on the floor otherwise
        ticks = log_ticks(min(times), max(times))
        fig.update_yaxes(title_text="ms per forward (log)", type="log", row=1, col=1, tickvals=ticks,
                         ticktext=[f"{t:g}" for t in ticks])
    else:
        fig.update_yaxes(title_text="ms per forward", row=1, col=1, rangemode="tozero")
    top = max([p["speedup_vs_eager"] or 0 for p in points] + [p["speedup_vs_compiled"] or 0 for p in points] + [1.0])
    fig.update_yaxes(title_text="speedup (×)", row=2, col=1, range=[0, top * 1.25])
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h", y=-0.18),
                      showlegend=True,  # a lone trace (all failed) still says what its marks are
                      hovermode="closest", bargap=0.5)
    return fig
