"""The run view's totals: the best speedups, time, iterations against the run's budget, tokens, cost and wall
time, and the words for a best that is slower than eager."""

from __future__ import annotations

import datetime as dt
from typing import Any

import streamlit as st

from . import services
from .formatting import fmt_cost, fmt_duration, fmt_ms, fmt_tokens, fmt_x, parse_ts, slowdown_delta
from .run_state import RunState


def _wall_s(run: dict[str, Any], state: RunState, live: bool) -> float | None:
    """Time the run spent working: the sum of its sessions (created, each resume), not the idle time between a
    cancel and a resume. Without session events (an old record) the span from creation to the end."""
    now = dt.datetime.now(dt.timezone.utc)
    total, counted = 0.0, False
    for start_ts, end_ts in state.sessions:
        start = parse_ts(start_ts)
        end = parse_ts(end_ts) or (now if live else parse_ts(run.get("finished_at") or run.get("updated_at")))
        if start and end:
            total += max(0.0, (end - start).total_seconds())
            counted = True
    if counted:
        return total
    start = parse_ts(run.get("created_at"))
    end = parse_ts(run.get("finished_at")) or (now if live else parse_ts(run.get("updated_at")))
    return (end - start).total_seconds() if start and end else None


def iteration_budget(run: dict[str, Any], state: RunState) -> int | None:
    """The most iterations the run may take, from its settings (both passes, k candidates a step), so the number
    does not change as passes start; the passes' own announcements only for runs without stored settings."""
    if run.get("kind") == "manual":  # a person's versions: no budget
        return None
    config = run.get("config") or {}
    steps = (config.get("max_functional_iters") or 0) + (config.get("max_optimization_iters") or 0)
    if steps:
        return steps * max(1, int(config.get("best_of_k") or 1))
    return sum(p.get("max_iterations") or 0 for p in state.passes) or None


def totals(run: dict[str, Any], state: RunState, live: bool) -> None:
    budget = iteration_budget(run, state)
    done = sum(1 for it in state.iterations.values() if it.finished)
    prompt_tokens = run.get("tokens_prompt") or state.tokens_prompt
    completion_tokens = run.get("tokens_completion") or state.tokens_completion
    # each call's recorded cost (per agent, at its price then) where the loop priced them; else today's prices
    cost = (f"{state.cost:.4f}" if state.cost < 1 else f"{state.cost:.2f}") if state.cost is not None else \
        fmt_cost(prompt_tokens, completion_tokens, *services.prices())
    best_it = run.get("best_iteration")
    cols = st.columns(6)
    cols[0].metric("Best vs eager", fmt_x(run.get("best_speedup_vs_eager")),
                   help="eager PyTorch time ÷ the best correct program's time",
                   **slowdown_delta(run.get("best_speedup_vs_eager"), "eager"))
    cols[1].metric("Best vs torch.compile", fmt_x(run.get("best_speedup_vs_compiled")),
                   **slowdown_delta(run.get("best_speedup_vs_compiled"), "torch.compile"))
    cols[2].metric("Best time", fmt_ms(run.get("best_candidate_ms")),
                   help=f"iteration #{best_it}" if best_it is not None else "no correct program yet")
    cols[3].metric("Iterations", f"{done}" + (f" / {budget}" if budget else ""),
                   help="finished / the most the run may take (functional + optimization passes); a run stops "
                        "early once a pass has nothing left to do")
    if run.get("agent") in ("builtin", "manual") and not (prompt_tokens or completion_tokens):
        cols[4].metric("Tokens", "none", help="no LLM was called (the built-in agents, or a person's versions)")
    else:
        cols[4].metric("Tokens", f"{fmt_tokens(prompt_tokens)} / {fmt_tokens(completion_tokens)}",
                       help="prompt / completion tokens, all agents" + ("" if cost else
                            "; set prices per 1M tokens in Settings to see the cost"))
    cols[5].metric("Wall time", fmt_duration(_wall_s(run, state, live)),
                   help="time the run spent working (not the idle time between a cancel and a resume)"
                        + (f"; cost {cost}" if cost else ""))
    if cost:
        st.caption(f"Cost so far: **{cost}** (at your prices per 1M tokens from Settings)")
    _slowdown_warning(run, state, live)


def _slowdown_warning(run: dict[str, Any], state: RunState, live: bool) -> None:
    """Beside the best speedup: a best slower than eager is said in words, never left to read as a result. The
    finished run's words are the loop's own (its `slower_than_baseline` event: what it loses to, what to use)."""
    if state.slower and not live:
        box = st.error if "eager" in (state.slower.get("slower_than") or []) else st.warning
        box(state.slower.get("message") or "No kernel beats eager PyTorch.", icon=":material/slow_motion_video:")
        return
    speedup = run.get("best_speedup_vs_eager")
    if speedup is not None and speedup < 1.0:
        st.warning(f"The best correct program so far is **{1 / speedup:.2f}x slower than eager PyTorch** "
                   f"({fmt_x(speedup)}): not a speedup" + (" yet; the run goes on." if live else "."),
                   icon=":material/slow_motion_video:")
