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
