"""Helpers shared by CLI commands: formatting numbers, JSON output."""

from __future__ import annotations

import json
import sys


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 0.1:
        return f"{value * 1000:.1f} µs"
    return f"{value:.3g} ms"


def fmt_x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()
