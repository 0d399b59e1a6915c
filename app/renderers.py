"""One renderer per event kind, shared by live and stored runs.

A renderer draws one event into the current Streamlit container. The run view decides *where* (an iteration's tab,
the activity log, the "writing now" box); the renderer decides *how*. A kind without a renderer here is shown as
its raw JSON, so a new event kind from the loop is visible before anyone writes its renderer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from kforge_core.profiling import kernel_label
from kforge_core.store import EventKind

from .formatting import fmt_ms, fmt_tokens, fmt_when, fmt_x, run_badge, verdict_badge
from .highlight import kernel_sources, plain_html, to_html
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


# --------------------------------------------------------------------------------------------------- iteration tabs

@renders(EventKind.PROGRAM_EXTRACTED, tab="Program", order=10)
def program_extracted(event: dict, ctx: RenderContext) -> None:
    data = event["data"]
    code = data.get("code") or ""
    if data.get("notes"):
        st.caption(data["notes"])
    kernels = kernel_sources(code)
    # The kernels first: they are what changes from one iteration to the next; the Python around them (helpers,
    # launch set-up) follows as the whole program.
    for name, first_line, source in kernels:
        st.markdown(f"**Kernel source** `{name}` ({ctx.kernel_language}, program lines {first_line}–"
                    f"{first_line + source.count(chr(10))})")
        _html(to_html(source, ctx.kernel_language, first_line=first_line))
    with_kernels = f", with the kernel source{'s' if len(kernels) > 1 else ''} above" if kernels else ""
    st.markdown(f"**Whole program** (Python{with_kernels})")
    _html(to_html(code, data.get("language") or "python"))
    index = event.get("iteration")
    st.download_button("Download this program", code, file_name=f"iteration_{index}.py", mime="text/x-python",
                       key=f"dl-{event['seq']}", icon=":material/download:", on_click="ignore")


@renders(EventKind.PROGRAM_MISSING, tab="Result", order=5)
def program_missing(event: dict, ctx: RenderContext) -> None:
    data = event["data"]
    st.warning(missing_text(data.get("error"), ctx.builtin), icon=":material/code_off:")
    if data.get("coverage"):
        st.caption(f"Coverage: {data['coverage']}")
    if data.get("reply_excerpt"):
        st.caption("Excerpt of the reply")
        _html(plain_html(data["reply_excerpt"]))


@renders(EventKind.DIFF, tab="Diff", order=10)
def diff(event: dict, ctx: RenderContext) -> None:
    data = event["data"]
    text = data.get("unified_diff") or ""
    against = data.get("against_iteration")
    base = f"iteration #{against}" if against is not None else "the previous program"
    if not text.strip():
        st.info(f"Identical to {base}.")
        return
    added = sum(1 for line in text.splitlines() if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in text.splitlines() if line.startswith("-") and not line.startswith("---"))
    st.markdown(f"Changes against {base}: :green[**+{added}**] :red[**−{removed}**] lines")
    _html(to_html(text, "diff", line_numbers=False))


@renders(EventKind.VERDICT, tab="Result", order=10)
def verdict(event: dict, ctx: RenderContext) -> None:
    v = event["data"].get("verdict") or {}
    st.markdown(f"{verdict_badge(v.get('status'))} {v.get('reason') or ''}")
    facts = []
    if v.get("max_abs_error") is not None:
        facts.append(f"max abs error {_num(v['max_abs_error'])}")
    if v.get("max_rel_error") is not None:
        facts.append(f"max rel error {_num(v['max_rel_error'])}")
    if v.get("custom_share") is not None:
        facts.append(f"{100 * v['custom_share']:.0f}% of the forward in its own kernels")
    tol = v.get("tolerance") or {}
    if tol.get("name"):
        facts.append(f"tolerance policy `{tol['name']}`")
    if v.get("build_s") is not None:
        facts.append(f"build {v['build_s']:.2f} s")
    if v.get("wall_s") is not None:
        facts.append(f"evaluation {v['wall_s']:.1f} s")
    if v.get("device"):
        facts.append(f"on {v['device']}")
    if facts:
        st.caption(" · ".join(facts))
    for warning in v.get("warnings") or []:
        st.warning(warning, icon=":material/warning:")
    roof = v.get("roofline") or {}
    if roof.get("suspicious"):
        st.error(roof["suspicious"], icon=":material/report:")
    if roof.get("ceilings_note"):
        st.warning(roof["ceilings_note"], icon=":material/warning:")
    checks = v.get("checks") or []
    if checks:
        st.dataframe([{"check": c.get("name"), "passed": bool(c.get("passed")), "detail": c.get("detail", "")}
                      for c in checks], hide_index=True, width="stretch")
    if v.get("kernel_launches"):
        st.caption(launches_text(v["kernel_launches"], v.get("kernel_launch_calls") or 0))
    if v.get("reported_by_candidate"):
        st.caption(reported_text(v["reported_by_candidate"]))
    if v.get("log_tail"):
        with st.expander("What the program printed (last lines)"):
            _html(plain_html(v["log_tail"]))


def reported_text(fields: list[str]) -> str:
    """Which verdict fields the judge took from the candidate's process as its claims."""
    names = ", ".join(str(f).replace("_", " ") for f in fields)
    return (f"Reported by the candidate's process (not measured by the judge): {names}. They cannot make a verdict "
            f"correct or a time shorter.")


def launches_text(launches: dict[str, int], calls: int) -> str:
    """The checked calls' kernel launches as per-forward counts (the verdict holds totals over `calls` calls)."""
    if calls <= 0:  # a verdict from before the count was recorded: totals, said as such
        return "Kernel launches over the checked calls: " + ", ".join(f"`{k}` × {n}" for k, n in launches.items())
    per = ", ".join(f"`{k}` × {n / calls:g}" for k, n in launches.items())
    return f"Kernel launches per forward: {per} (counted over {calls} checked calls)"


@renders(EventKind.TIMINGS, tab="Result", order=20)
def timings(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    cols = st.columns(5)
    cols[0].metric("Program", fmt_ms(d.get("candidate_ms")))
    cols[1].metric("Eager PyTorch", fmt_ms(d.get("eager_ms")))
    cols[2].metric("torch.compile", fmt_ms(d.get("compiled_ms")))
    cols[3].metric("Speedup vs eager", fmt_x(d.get("speedup_vs_eager")))
    cols[4].metric("Speedup vs compile", fmt_x(d.get("speedup_vs_compiled")))
    spreads = [{"timing": name, "median": fmt_ms(t.get("median_ms")), "min": fmt_ms(t.get("min_ms")),
                "max": fmt_ms(t.get("max_ms")), "trials": t.get("trials")}
               for name, t in (("program", d.get("candidate")), ("eager", d.get("eager")),
                               ("torch.compile", d.get("compiled"))) if isinstance(t, dict)]
    if spreads:
        st.dataframe(spreads, hide_index=True, width="stretch")
    if d.get("torch_compile_s") is not None:
        st.caption(f"torch.compile took {d['torch_compile_s']:.1f} s to build the baseline (not part of its time"
                   f"{'; built once for this run and kept warm' if d.get('baseline_shared') else ''}).")


@renders(EventKind.COMPILE_LOG, tab="Result", order=30)
def compile_log(event: dict, ctx: RenderContext) -> None:
    log = event["data"].get("log") or ""
    if not log.strip():
        return
    st.markdown("**Compiler output** (line numbers are the program's own)")
    _html(plain_html(log))


@renders(EventKind.ERROR, tab="Result", order=40)
def error(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    where = f" ({d['where']})" if d.get("where") else ""
    if ctx.compact:
        st.markdown(f":red[:material/error: error{where}:] {d.get('message', '')}")
    else:
        st.error(f"{d.get('message', 'error')}{where}", icon=":material/error:")


@renders(EventKind.PROFILE, tab="Profile", order=10)
def profile(event: dict, ctx: RenderContext) -> None:
    prof = event["data"].get("profile") or {}
    roof = event["data"].get("roofline") or {}
    if prof:
        st.markdown(f"**Profile** from {prof.get('tool', 'the profiler')} on {prof.get('device', 'the device')}: "
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
            st.caption(f"• {note}")
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
        st.caption(d["notes"])
    recs = d.get("recommendations") or []
    for n, rec in enumerate(recs, 1):
        with st.container(border=True):
            gain = f" :blue-badge[{rec['expected_gain']}]" if rec.get("expected_gain") else ""
            move = f" :gray-badge[{rec['move']}]" if rec.get("move") else ""
            st.markdown(f"**{n}. {rec.get('title', '')}**{gain}{move}")
            if rec.get("change"):
                st.markdown(rec["change"])
            if rec.get("why"):
                st.caption(f"Why: {rec['why']}")
    if not recs:
        st.info("The analysis agent made no recommendation.")
    if d.get("text"):
        with st.expander("The analysis in full"):
            st.markdown(d["text"])


# Model I/O keeps the conversation in the order it happened: prompt, streamed answer, usage; then the next call.
@renders(EventKind.PROMPT_SENT, tab="Model I/O", order=10)
def prompt_sent(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    messages = d.get("messages") or []
    st.markdown(f"**Prompt to the {d.get('agent', '')} agent** · `{d.get('model') or 'built-in'}` · "
                f"{len(messages)} message{'s' if len(messages) != 1 else ''}")
    for m in messages:
        content = m.get("content")
        images = 0
        if isinstance(content, list):
            texts = []
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    texts.append(part.get("text", ""))
                elif isinstance(part, dict):
                    images += 1
            content = "\n\n".join(texts)
        text = str(content or "")
        label = f"{m.get('role', '?')} · {len(text):,} characters" + (f" · {images} image(s)" if images else "")
        with st.expander(label):
            _html(plain_html(text))


@renders(EventKind.TOKENS, tab="Model I/O", order=10)
def tokens(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    text = d.get("text") or ""
    agent = d.get("agent") or "generation"
    if ctx.compact:
        tail = text[-TAIL_CHARS:]
        if len(text) > len(tail):
            tail = "…" + tail[tail.find("\n") + 1:]
        _html(plain_html(tail).replace('class="kf-code kf-log"', 'class="kf-code kf-log kf-stream"'))
        return
    if d.get("thinking"):  # reasoning_content or <think>: not the answer, kept folded
        with st.expander(f"Thinking of the {agent} agent ({len(text):,} characters, as streamed)"):
            _html(plain_html(text))
        return
    st.markdown(f"**Output of the {agent} agent** ({len(text):,} characters, as streamed)")
    _html(plain_html(text))


@renders(EventKind.RETRY, tab="Model I/O", order=10)
def retry(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    if d.get("where") == "loop":
        what = f"waiting {d.get('delay_s', 0):.0f} s before the next step (endpoint failure {d.get('attempt')} in a row)"
    else:
        what = f"retrying in {d.get('delay_s', 0):.1f} s (attempt {(d.get('attempt') or 0) + 1})"
    st.warning(f"Model endpoint ({d.get('agent')}): {d.get('error', '')} — {what}", icon=":material/refresh:")


# --------------------------------------------------------------------------------------------------- activity log

def _line(event: dict, text: str) -> None:
    st.markdown(f"<span class='kf-when'>{fmt_when(event.get('ts'))}</span> {text}", unsafe_allow_html=True)


@renders(EventKind.RUN_CREATED)
def run_created(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    who = f"`{d['model']}`" if d.get("model") else "the built-in synthesizer" if d.get("agent") == "builtin" \
        else "LLM agents"
    _line(event, f"Run created: **{d.get('problem_name')}** on `{d.get('target')}` with {who}")


@renders(EventKind.PASS_STARTED)
def pass_started(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    n = d.get("max_iterations")
    _line(event, f"**{str(d.get('pass', '')).capitalize()} pass** started (up to {n if n is not None else '?'} "
                 f"iteration{'' if n == 1 else 's'})")


@renders(EventKind.ITERATION_FINISHED)
def iteration_finished(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    speed = f" · {fmt_x(d['speedup_vs_eager'])} vs eager" if d.get("speedup_vs_eager") is not None else ""
    reason = d.get("reason") or ""
    short = reason if len(reason) <= 140 else reason[:139] + "…"
    which = f"#{d['first_index']}–#{d.get('index')}" if d.get("repeats") else f"#{d.get('index')}"
    times = f" (×{d['repeats']})" if d.get("repeats") else ""
    _line(event, f"{which} {verdict_badge(d.get('status'))}{times}{speed} {short}")
    if short != reason:  # the whole reason one click away, in the log itself
        _html(f"<details class='kf-more'><summary>whole reason</summary>{plain_html(reason)}</details>")


@renders(EventKind.BEST_UPDATED)
def best_updated(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    sx = d.get("speedup_vs_eager")
    # the fastest correct program so far is not a gain while it is slower than eager: no green trophy then
    mark = ":orange[:material/slow_motion_video:] New best, still slower than eager" if sx is not None and sx < 1 \
        else ":green[:material/trophy:] New best"
    _line(event, f"{mark}: #{d.get('iteration')} at {fmt_ms(d.get('candidate_ms'))} "
                 f"({fmt_x(sx)} vs eager, {fmt_x(d.get('speedup_vs_compiled'))} vs compile)")


@renders(EventKind.SLOWER_THAN_BASELINE)
def slower_than_baseline(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    lost_to = " and ".join(d.get("slower_than") or ["eager"])
    _line(event, f":red[:material/slow_motion_video: **Slower than {lost_to}**] {d.get('message', '')}")


@renders(EventKind.EVAL_STAGE, tab="Result", order=5)
def eval_stage(event: dict, ctx: RenderContext) -> None:
    """Stages are folded into the running iteration's header (run_state); drawn as a line only where listed."""
    st.caption(f"… {event['data'].get('stage', '')}")


@renders(EventKind.HEAD_TO_HEAD)
def head_to_head(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    if d.get("error"):
        _line(event, f"Head to head not decided: {d['error']}")
        return
    rows = ", ".join(f"#{r.get('iteration')} {fmt_ms(r.get('candidate_ms'))} (min {fmt_ms(r.get('min_ms'))}, max "
                     f"{fmt_ms(r.get('max_ms'))}, {r.get('trials')} trials)" for r in d.get("contenders") or [])
    _line(event, f":material/sports_score: Head to head: {rows} → best #{d.get('best_iteration')}. "
                 f"<span class='kf-when'>{d.get('rule', '')}</span>")


@renders(EventKind.USAGE, tab="Model I/O", order=10)
def usage(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    took = f" in {d['latency_s']:.1f} s" if isinstance(d.get("latency_s"), (int, float)) else ""
    estimated = " (estimated)" if d.get("estimated") else ""
    failed = " by a call that broke" if d.get("failed") else ""
    cost = f" · {d['cost']:.4f} (at the agent's price)" if isinstance(d.get("cost"), (int, float)) else ""
    st.caption(f"{fmt_tokens(d.get('prompt_tokens'))} prompt + {fmt_tokens(d.get('completion_tokens'))} completion "
               f"tokens{estimated}{failed}{took}{cost}")
    if d.get("warning"):
        st.warning(d["warning"], icon=":material/warning:")


@renders(EventKind.RUN_FINISHED)
def run_finished(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    best = (f"; best #{d['best_iteration']} at {fmt_x(d.get('best_speedup_vs_eager'))} vs eager"
            if d.get("best_iteration") is not None else "; no correct program")
    err = f" — {d['error']}" if d.get("error") else ""
    stopped = (f" · stopped: {d['stop_reason']}" if d.get("stop_reason") and d.get("stop_reason") != d.get("error")
               else "")
    _line(event, f"Run finished {run_badge(d.get('status'), d.get('best_speedup_vs_eager'))}{best}{err}{stopped}")


@renders(EventKind.RUN_INTERRUPTED)
def run_interrupted(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    why = {"worker_dead": f"its worker process {d.get('worker_pid')} is gone",
           "heartbeat_stale": "its worker stopped reporting"}.get(d.get("reason"), d.get("reason"))
    _line(event, f"{run_badge('interrupted')} {why}; it can be resumed")


@renders(EventKind.RUN_RESUMED)
def run_resumed(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    where = f"after iteration #{d['from_iteration']}" if d.get("from_iteration") is not None else "from the start"
    _line(event, f"Resumed {where} (was {d.get('previous_status')})")


@renders(EventKind.CANCEL_REQUESTED)
def cancel_requested(event: dict, ctx: RenderContext) -> None:
    _line(event, "Cancel requested; the worker stops after the current step")
