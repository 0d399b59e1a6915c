"""Renderers of an iteration's Profile and Analysis tabs: the profile (kernels named by what they compute), the
roofline, and the analysis agent's recommendations."""

from __future__ import annotations

import json
import re
from typing import Any

import streamlit as st

from kforge_core.profiling import kernel_label
from kforge_core.store import EventKind

from .formatting import fmt_ms, model_markdown, untrusted
from .render_registry import RenderContext, _num, renders


@renders(EventKind.PROFILE, tab="Profile", order=10)
def profile(event: dict, ctx: RenderContext) -> None:
    prof = event["data"].get("profile") or {}
    roof = event["data"].get("roofline") or {}
    if prof:
        st.markdown(f"**Profile** from {untrusted(prof.get('tool', 'the profiler'))} on "
                    f"{untrusted(prof.get('device', 'the device'))}: "
                    f"{fmt_ms(prof.get('per_forward_ms'))} per forward, custom kernels "
                    f"{100 * (prof.get('custom_share') or 0):.0f}% of the time, "
                    f"{_num(prof.get('launches_per_forward'), '{:.3g}')} custom launches per forward")
        ops = kernel_ops(ctx.state.iterations[event["iteration"]].code
                         if event.get("iteration") in ctx.state.iterations else None)
        rows = [{"kernel / op": _row_label(k, ops), "custom": bool(k.get("custom")),
                 "share %": round(100 * (k.get("share") or 0), 1), "ms / forward": k.get("ms_per_forward"),
                 "calls / forward": k.get("calls_per_forward")} for k in prof.get("kernels") or []]
        if rows:
            st.dataframe(rows, hide_index=True, width="stretch", column_config={
                "share %": st.column_config.ProgressColumn("share", format="%.1f%%", min_value=0, max_value=100),
                "ms / forward": st.column_config.NumberColumn(format="%.4f"),
                "calls / forward": st.column_config.NumberColumn(format="%.2f")})
        for note in prof.get("notes") or []:
            st.caption(f"• {untrusted(note)}")
    if roof:
        bound = roof.get("bound") or "unknown"
        pct = roof.get("pct_of_roofline")
        st.markdown(f"**Roofline**: {bound}-bound; floor {fmt_ms(roof.get('floor_ms'))} at the measured ceilings "
                    f"({_num(roof.get('bandwidth_gbs'), '{:.1f}')} GB/s, {_num(roof.get('fp32_tflops'), '{:.2f}')} "
                    f"TFLOP/s fp32); this program reaches {_num(pct, '{:.0f}')}% of it"
                    + (f" by its timed call, {roof['pct_of_roofline_device']:.0f}% by its kernels' device time "
                       f"({fmt_ms(roof.get('device_ms'))} per forward)" if roof.get("pct_of_roofline_device") else ""))
        st.caption(work_text(roof.get("bytes"), roof.get("flops"))
                   + (f"; {roof['ceilings_label']}" if roof.get("ceilings_label") else ""))
        if roof.get("device_note"):
            st.caption(roof["device_note"])
        if roof.get("suspicious"):
            st.error(roof["suspicious"], icon=":material/report:")


# The built-in synthesizer's marker line (kforge_core.synth.schedule.MARKER): its kernels' names and the
# ops each computes. Read here with a regex: the app does not import the synthesizer.
_MARKER = re.compile(r"^# kforge-builtin: (\{.*\})\s*$", re.M)


def kernel_ops(code: str | None) -> dict[str, str]:
    """Kernel name -> the ops it computes ("kf_k0" -> "mul+sigmoid"), from a built-in program's marker."""
    m = _MARKER.search(code or "")
    if not m:
        return {}
    try:
        kernels = json.loads(m.group(1)).get("kernels") or []
    except (ValueError, AttributeError):
        return {}
    return {k["name"]: k["label"] for k in kernels if isinstance(k, dict) and k.get("name") and k.get("label")}


def _row_label(row: dict, ops: dict[str, str]) -> str:
    """A profile row named by what it computes: the launching op when the profiler linked one, else the op the
    built-in synthesizer wrote the kernel for (a CPU kernel's row is only `kforge::kf_k0`)."""
    short = (row.get("name") or "").split("::")[-1]
    if not row.get("op") and short in ops:
        return f"{ops[short]} ({short})"
    return kernel_label(row)


def work_text(nbytes: Any, flops: Any) -> str:
    """The problem's minimum work as the roofline counts it. PyTorch's FLOP counter counts matrix products and
    convolutions only, so 0 means "none of those", not "no arithmetic"; None means it could not count."""
    moved = f"moves at least {nbytes:,} bytes" if isinstance(nbytes, int) else "bytes moved unknown"
    if isinstance(flops, int) and flops > 0:
        return f"The problem {moved} and does at least {flops:,} FLOPs in matrix products / convolutions."
    if flops == 0:
        return (f"The problem {moved}; it has no matrix product or convolution (the only FLOPs PyTorch's counter "
                "counts), so its floor is the memory floor.")
    return f"The problem {moved}; its FLOPs could not be counted, so no compute floor is given."


@renders(EventKind.RECOMMENDATIONS, tab="Analysis", order=10)
def recommendations(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    about = (f" of iteration #{d['analyzed_iteration']}" if d.get("analyzed_iteration") is not None else "")
    who = d.get("agent_label") or "the analysis agent"
    if d.get("analyzed_iteration") is not None and d["analyzed_iteration"] == event.get("iteration"):
        st.caption(f"Performance analysis of this program by {who}, asked for in the Workbench.")
    else:
        st.caption(f"Performance analysis{about} by {who}; these recommendations guided this iteration's program.")
    if d.get("notes"):
        st.caption(untrusted(d["notes"], lines=True))
    recs = d.get("recommendations") or []
    for n, rec in enumerate(recs, 1):
        with st.container(border=True):
            # a model wrote them (an LLM analysis agent): shown as its words, never as page markup
            gain = f" :blue-badge[{untrusted(rec['expected_gain'])}]" if rec.get("expected_gain") else ""
            move = f" :gray-badge[{untrusted(rec['move'])}]" if rec.get("move") else ""
            st.markdown(f"**{n}. {untrusted(rec.get('title', ''))}**{gain}{move}")
            if rec.get("change"):
                st.markdown(model_markdown(rec["change"]))
            if rec.get("why"):
                st.caption(f"Why: {untrusted(rec['why'])}")
    if not recs:
        st.info("The analysis agent made no recommendation.")
    if d.get("text"):
        with st.expander("The analysis in full"):
            st.markdown(model_markdown(d["text"]))
