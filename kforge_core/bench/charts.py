"""Plotly figures for benchmark results, shared by the HTML report and the app's Benchmark page."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from .metrics import BASELINES, fast_p

_LABEL = {"eager": "vs eager PyTorch", "compiled": "vs torch.compile"}


def fast_p_figure(records: list[dict]) -> go.Figure:
    ps = [i / 20 for i in range(0, 61)]  # p from 0 to 3 in steps of 0.05
    fig = go.Figure()
    for b in BASELINES:
        fig.add_trace(go.Scatter(x=ps, y=[fast_p(records, p, b) for p in ps], mode="lines", name=_LABEL[b]))
    fig.update_layout(title="fast_p: share of problems correct and more than p× faster", xaxis_title="p (speedup "
                      "threshold)", yaxis_title="fast_p", yaxis_range=[0, 1.02], template="plotly_white", height=380)
    return fig


# Log-axis ticks, labelled as speedups ("0.3×", not the bare mantissa digit "3" that plotly's minor labels show).
_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20, 50, 100, 200, 500, 1000)
_GAIN, _LOSS = "#2f9e44", "#e03131"


def speedup_ticks(values: list[float]) -> list[float]:
    """Tick values spanning `values` and 1x on a log axis: a few per decade, always 1."""
    lo, hi = min(values + [1.0]), max(values + [1.0])
    ticks = [t for t in _TICKS if lo / 1.6 <= t <= hi * 1.6]
    return ticks if 1 in ticks else sorted(ticks + [1])


def speedup_figure(records: list[dict]) -> go.Figure:
    """Speedup per problem on a log axis, bars growing from 1x (up: faster, green edge; down: slower, red edge),
    so a 0.31x slowdown hangs below the 1x line instead of rising from the axis floor like a gain."""
    names = [r["problem"] for r in records]
    fig = go.Figure()
    values = []
    for b, colour in zip(BASELINES, ("#1c7ed6", "#7048e8")):
        ys = [r.get(f"speedup_vs_{b}") if r.get("correct") else None for r in records]
        shown = [y for y in ys if y]
        values += shown
        fig.add_trace(go.Bar(
            x=names, y=[(y - 1.0) if y else None for y in ys], base=[1.0] * len(ys), name=_LABEL[b],
            marker=dict(color=colour, line=dict(color=[_GAIN if (y or 1) >= 1 else _LOSS for y in ys], width=2)),
            text=[f"{y:.2f}×" if y else "" for y in ys], textposition="outside", cliponaxis=False,
            customdata=[y for y in ys], hovertemplate="%{x}: %{customdata:.2f}× " + _LABEL[b] + "<extra></extra>"))
    failed = [r["problem"] for r in records if not r.get("correct")]
    if failed:  # a problem without a correct program has no speedup: marked on the 1x line, not left blank
        fig.add_trace(go.Scatter(x=failed, y=[1.0] * len(failed), mode="markers+text", name="no correct program",
                                 marker=dict(symbol="x", size=11, color=_LOSS), text=["no correct program"] *
                                 len(failed), textposition="bottom center", textfont=dict(color=_LOSS),
                                 hovertemplate="%{x}: no correct program<extra></extra>"))
    ticks = speedup_ticks(values)
    fig.add_hline(y=1.0, line_dash="dot", line_color="#495057")
    fig.add_annotation(text="1× (no change)", xref="paper", x=1.0, xanchor="right", y=0, yref="y",
                       yanchor="bottom", showarrow=False, font=dict(color="#495057"))  # log axis: y is log10
    fig.update_layout(title="Speedup per problem (correct programs only; bars from 1×: up is faster, down slower)",
                      yaxis=dict(type="log", title="speedup", tickvals=ticks, ticktext=[f"{t:g}×" for t in ticks],
                                 range=[math.log10(ticks[0]), math.log10(ticks[-1])]),
                      barmode="group", template="plotly_white", height=420, xaxis_tickangle=-45)
    return fig
