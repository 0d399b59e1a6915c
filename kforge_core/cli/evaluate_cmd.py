"""`evaluate`: judge one candidate against one problem on one target."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UsageError
from ..eval.evaluator import EvalOptions, evaluate
from ..problem import load_problem
from ..eval.tolerance import POLICIES
from ..eval.verdict import Verdict
from ..formatting import fmt_ms, fmt_spread, fmt_x
from .common import add_timing_options, print_json, timing_options_from_args


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="compile, check and time a candidate (ModelNew) against a problem",
                       description="Runs the candidate in a sandboxed child process and prints a verdict: correct, "
                                   "incorrect, compile_error, runtime_error, timeout or rejected. Exit code 0 "
                                   "whenever a verdict was produced.")
    p.add_argument("--problem", required=True, help="KernelBench-format problem file (Model, get_inputs, ...)")
    p.add_argument("--candidate", required=True, help="candidate program defining ModelNew (or NewModel)")
    p.add_argument("--target", required=True, help="target platform (see `platforms`)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a report")
    p.add_argument("--tolerance", default="default", choices=sorted(POLICIES), help="tolerance policy")
    p.add_argument("--seeds", type=int, default=5, help="correctness trials with fresh inputs (>= 5)")
    p.add_argument("--no-timing", action="store_true", help="check correctness only")
    p.add_argument("--no-baselines", action="store_true", help="skip timing eager and torch.compile")
    add_timing_options(p)
    p.add_argument("--profile", action="store_true", help="also run the platform's profiler adapter")
    p.add_argument("--size-class", choices=("cpu", "gpu"), help="apply a gallery problem's size class")
    p.add_argument("--timeout", type=float, default=300.0, help="wall-clock limit in seconds (default 300)")
    p.add_argument("--memory-limit-mb", type=int, default=None,
                   help="memory limit of the child (MiB; default: 16 GiB, or 60 %% of this host's memory if more)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    problem = load_problem(path=args.problem)
    cand = Path(args.candidate)
    if not cand.is_file():
        raise UsageError(f"candidate file not found: {cand}")
    options = EvalOptions(seeds=args.seeds, tolerance=args.tolerance, timing=not args.no_timing,
                          baselines=not args.no_baselines, profile=args.profile, size_class=args.size_class,
                          timeout_s=args.timeout, timing_options=timing_options_from_args(args),
                          **({} if args.memory_limit_mb is None else {"memory_limit_mb": args.memory_limit_mb}))
    def on_stage(stage: dict) -> None:  # progress on stderr, so --json's stdout stays one object
        print(f"  … {stage['stage']}", file=sys.stderr, flush=True)

    verdict = evaluate(problem, cand.read_text(), args.target, options, on_stage=on_stage)
    if args.json:
        print_json(verdict.to_dict())
    else:
        print(report(verdict))
    return 0


def spread_text(t) -> str:
    """A timing as median, min, max and trial count: the spread is part of the number."""
    return fmt_spread(t.median_ms, t.min_ms, t.max_ms, t.trials)


def report(v: Verdict) -> str:
    lines = [f"{v.status.upper()}: {v.reason}"]
    if v.candidate:
        lines.append(f"  candidate      {spread_text(v.candidate)}")
    if v.eager:
        lines.append(f"  eager          {spread_text(v.eager)}   speedup {fmt_x(v.speedup_vs_eager)}")
    if v.compiled:
        took = f" (torch.compile took {v.torch_compile_s:.1f} s" if v.torch_compile_s else ""
        if took:
            took += ", built once for this problem and kept warm)" if v.baseline else ")"
        lines.append(f"  torch.compile  {spread_text(v.compiled)}   speedup {fmt_x(v.speedup_vs_compiled)}{took}")
    if v.max_abs_error is not None and v.tolerance:
        t = v.tolerance
        lines.append(f"  max abs error {v.max_abs_error:.3g} (tolerance '{t['name']}': fp32 atol={t['fp32']['atol']:g} "
                     f"rtol={t['fp32']['rtol']:g})")
    if v.roofline and v.roofline.get("pct_of_roofline"):
        r = v.roofline
        lines.append(f"  roofline       {r['pct_of_roofline']:.0f}% of the {r['bound']}-bound floor "
                     f"({fmt_ms(r['floor_ms'])}; {r.get('ceilings_label') or 'measured ceilings'})")
        if r.get("pct_of_roofline_device"):
            lines.append(f"                 {r['pct_of_roofline_device']:.0f}% by the kernels' device time "
                         f"({fmt_ms(r['device_ms'])} per forward, profiler)")
        elif r.get("device_note"):
            lines.append(f"                 {r['device_note']}")
    if v.custom_share is not None:
        lines.append(f"  own kernels    {100 * v.custom_share:.0f}% of the forward's time"
                     f"{'; ATen compute inside: ' + ', '.join(v.aten_compute[:4]) if v.aten_compute else ''}")
    if v.build_s is not None:
        lines.append(f"  build          {v.build_s:.2f} s")
    for w in v.warnings:
        lines.append(f"  warning: {w}")
    if v.compile_log and v.status == "compile_error":
        lines.append("  compiler output:")
        lines.extend("    " + ln for ln in v.compile_log.strip().splitlines()[-25:])
    if v.log_tail and v.status in ("runtime_error", "timeout"):
        lines.append("  process output (last lines):")
        lines.extend("    " + ln for ln in v.log_tail.strip().splitlines()[-15:])
    lines.append(f"  device: {v.device or v.target}   wall time {v.wall_s:.1f} s" if v.wall_s else "")
    return "\n".join(ln for ln in lines if ln)
