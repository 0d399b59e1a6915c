"""Renderers of an iteration's Program, Diff and Result tabs: the program (kernels first), its diff, the verdict,
the timings, the compiler's output and errors."""

from __future__ import annotations

import streamlit as st

from kforge_core.store import EventKind

from .formatting import fmt_ms, fmt_x, untrusted, verdict_badge
from .highlight import kernel_sources, plain_html, prelude_lines, to_html, wrap_marker
from .render_registry import RenderContext, _html, _num, missing_text, renders


@renders(EventKind.PROGRAM_EXTRACTED, tab="Program", order=10)
def program_extracted(event: dict, ctx: RenderContext) -> None:
    data = event["data"]
    code = data.get("code") or ""
    if data.get("notes"):
        st.caption(data["notes"])
    kernels = kernel_sources(code)
    # The kernels first: they are what changes from one iteration to the next. A source's prelude (includes, math
    # helpers: the same in every program of a target) is folded below its kernels; the Python around them (host
    # helpers, launch set-up) follows as the whole program.
    for name, first_line, source in kernels:
        last_line = first_line + source.count("\n")
        skip = prelude_lines(source)
        kernel = source.splitlines(keepends=True)[skip:]
        st.markdown(f"**Kernel source** `{name}` ({ctx.kernel_language}, program lines {first_line + skip}–"
                    f"{last_line})")
        _html(to_html("".join(kernel), ctx.kernel_language, first_line=first_line + skip))
        if skip:
            prelude = to_html("".join(source.splitlines(keepends=True)[:skip]), ctx.kernel_language,
                              first_line=first_line)
            _html(f"<details class='kf-prelude'><summary>Prelude of <code>{name}</code>: {skip} lines above the "
                  f"kernels (includes and helpers), program lines {first_line}–{first_line + skip - 1}</summary>"
                  f"{prelude}</details>")
    with_kernels = f", with the kernel source{'s' if len(kernels) > 1 else ''} above" if kernels else ""
    st.markdown(f"**Whole program** (Python{with_kernels})")
    _html(wrap_marker(to_html(code, data.get("language") or "python")))
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
    st.markdown(f"{verdict_badge(v.get('status'))} {untrusted(v.get('reason') or '', lines=True)}")
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
        st.markdown(f":red[:material/error: error{untrusted(where)}:] {untrusted(d.get('message', ''))}")
    else:
        st.error(f"{untrusted(d.get('message', 'error'), lines=True)}{untrusted(where)}", icon=":material/error:")


@renders(EventKind.EVAL_STAGE, tab="Result", order=5)
def eval_stage(event: dict, ctx: RenderContext) -> None:
    """Stages are folded into the running iteration's header (run_state); drawn as a line only where listed."""
    st.caption(f"… {untrusted(event['data'].get('stage', ''))}")
