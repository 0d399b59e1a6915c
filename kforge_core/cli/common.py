"""Helpers shared by CLI commands: JSON output."""

from __future__ import annotations

import json
import math
import sys


def json_safe(obj):
    """`obj` with every NaN/Infinity replaced by null (JSON has no such numbers: `NaN` breaks strict parsers), and,
    for a dict at the top, a `non_finite` field naming each replaced value ("max_abs_error": "nan")."""
    found: dict[str, str] = {}

    def walk(x, path: str):
        if isinstance(x, float) and not math.isfinite(x):
            found[path] = "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
            return None
        if isinstance(x, dict):
            return {k: walk(v, f"{path}.{k}" if path else str(k)) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(x)]
        return x

    clean = walk(obj, "")
    if found and isinstance(clean, dict):
        clean["non_finite"] = found
    return clean


def print_json(obj) -> None:
    json.dump(json_safe(obj), sys.stdout, indent=1, default=str, allow_nan=False)
    sys.stdout.write("\n")
    sys.stdout.flush()
