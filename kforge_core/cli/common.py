"""Helpers shared by CLI commands: JSON output, the timing options."""

from __future__ import annotations

import argparse
import json
import math
import sys

from ..errors import UsageError


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


def add_timing_options(group) -> None:
    """The timing phase's knobs, as the app's Evaluation settings have them."""
    group.add_argument("--min-trials", type=int, metavar="N", help="timed trials at least (default 10)")
    group.add_argument("--timing-budget", type=float, metavar="S",
                       help="wall time for the timed trials once the minimum is done, unless every median settles "
                            "sooner (default: the target's own, 2 s, 1 s on the CPU)")


def timing_options_from_args(args: argparse.Namespace) -> dict:
    """The `timing_options` given (`EvalOptions`, a run's `eval_timing_options`): only what was set."""
    given = {}
    for flag, key, value in (("--min-trials", "min_trials", args.min_trials),
                             ("--timing-budget", "budget_s", args.timing_budget)):
        if value is not None and value <= 0:
            raise UsageError(f"{flag} must be positive, got {value:g}")
        if value is not None:
            given[key] = value
    return given
