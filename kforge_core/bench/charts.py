"""Plotly figures for benchmark results, shared by the HTML report and the app's Benchmark page."""

from __future__ import annotations

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


def speedup_figure(records: list[dict]) -> go.Figure:
    names = [r["problem"] for r in records]
    fig = go.Figure()
    for b in BASELINES:
        fig.add_trace(go.Bar(x=names, y=[r.get(f"speedup_vs_{b}") if r.get("correct") else None for r in records],
                             name=_LABEL[b]))
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="1× (no change)")
    fig.update_layout(title="Speedup per problem (correct programs only)", yaxis_type="log", yaxis_title="speedup",
                      barmode="group", template="plotly_white", height=420, xaxis_tickangle=-45)
    return fig
