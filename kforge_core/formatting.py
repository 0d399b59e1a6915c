"""How times and speedups read wherever KForge shows them (CLI, app, bench reports): one spelling everywhere."""

from __future__ import annotations


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 0.1:
        return f"{value * 1000:.1f} µs"
    return f"{value:.3g} ms"


def fmt_x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def fmt_spread(median_ms: float | None, min_ms: float | None, max_ms: float | None, trials: int | None) -> str:
    """A timing as median, min, max and trial count: the spread is part of the number."""
    return f"{fmt_ms(median_ms)} median (min {fmt_ms(min_ms)}, max {fmt_ms(max_ms)}, {trials} trials)"


def judged_text(judged: bool | None) -> str:
    """Where a head-to-head's times were kept; "" for a record that does not say (runs before it was recorded)."""
    if judged is None:
        return ""
    return ("judged out of process: each contender ran in a process of its own, timed and checked by a judge that "
            "never imported one") if judged else \
        "not judged out of process: every contender ran in one process with the checks (KFORGE_JUDGE=0 or no memfd)"


def noise_bounds_text(bounds: dict | None) -> str:
    """The stated noise bounds a timing is checked against (kforge_core.eval.verdict.NOISE_BOUNDS)."""
    if not bounds:
        return ""
    return (f"noisy if the median is over {bounds['median_over_min']:g}x the fastest trial or the slowest trial over "
            f"{bounds['max_over_median']:g}x the median")


def checks_text(checks: list[dict]) -> str:
    """Check names, each marked passed (✓) or failed (✗)."""
    return ", ".join(f"{c.get('name')} {'✓' if c.get('passed') else '✗'}" for c in checks)
