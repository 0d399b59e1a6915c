"""The run's head-to-head as text (`synthesize` prints it live, `runs show` from the store): the rule that chose the
best, whether the contest was judged out of process, the noise bounds, and per contender its times with their
spread, the checks it passed and its warnings. Reads the stored `head_to_head` payload (loop/events.py)."""

from __future__ import annotations

from ..formatting import checks_text, fmt_spread, fmt_x, judged_text, noise_bounds_text


def head_to_head_lines(d: dict, indent: str = "  ") -> list[str]:
    """Lines for one `head_to_head` event's data; a record from before checks and noise were kept reads as far as
    it goes."""
    more = indent + "  "
    warnings = [f"{more}warning: {w}" for w in d.get("warnings") or []]
    if d.get("error"):
        return [f"{indent}head to head not decided: {d['error']}", *warnings]
    lines = [f"{indent}head to head ({d.get('rule', '')}):"]
    setting = "; ".join(t for t in (judged_text(d.get("judged")), noise_bounds_text(d.get("noise_bounds"))) if t)
    if setting:
        lines.append(f"{more}{setting}")
    for r in d.get("contenders") or []:
        mark = "  <- best" if r.get("iteration") == d.get("best_iteration") else ""
        noisy = "  NOISY" if r.get("noisy") else ""
        lines.append(f"{more}[{r.get('iteration')}] {_spread({**r, 'median_ms': r.get('candidate_ms')})}  "
                     f"{fmt_x(r.get('speedup_vs_eager'))} vs eager{noisy}{mark}")
        if r.get("checks"):
            lines.append(f"{more}    checks: {checks_text(r['checks'])}")
        lines += [f"{more}    warning: {w}" for w in r.get("warnings") or []]
    for label, t in (("eager", d.get("eager")), ("torch.compile", d.get("compiled"))):
        if t:
            lines.append(f"{more}{label:<14}{_spread(t)}")
    return lines + warnings


def _spread(t: dict) -> str:
    return fmt_spread(t.get("median_ms"), t.get("min_ms"), t.get("max_ms"), t.get("trials"))
