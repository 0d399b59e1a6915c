"""Where one evaluation's time goes, stage by stage: `evaluate()` of a problem's candidate, --runs times, printing
when each stage began (seconds from the call) and the verdict's timings.

    python bench/stage_timeline.py PROBLEM.py --target cuda [--candidate FILE] [--runs 2] [--baselines] [--out DIR]

Without --candidate the built-in synthesizer's first (plain) program for the problem is evaluated, so any
KernelBench file can be looked at as is. The first run pays what a run's first evaluation pays (fork server, pool,
ceilings, builds); later runs show the steady state. Written for problems at KernelBench's own sizes (inputs of
GiBs), where an evaluation of a kernel of milliseconds took about a minute on an H200 (issue 26).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent  # noqa: E402
from kforge_core.eval.evaluator import EvalOptions, evaluate  # noqa: E402
from kforge_core.problem import load_problem  # noqa: E402


def timeline(marks: list[tuple[float, str]], total: float) -> list[str]:
    """Each stage with its start and how long it lasted (until the next one, or the verdict)."""
    ends = [t for t, _ in marks[1:]] + [total]
    return [f"{t:7.2f} s  +{end - t:6.2f} s  {name}" for (t, name), end in zip(marks, ends)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem", type=Path)
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--candidate", type=Path, help="a ModelNew program (default: the built-in's plain program)")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--baselines", action="store_true", help="time the torch.compile baseline too")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="directory for stage_timeline_<problem>.json")
    args = ap.parse_args()
    problem = load_problem(path=args.problem)
    if args.candidate:
        source = args.candidate.read_text()
    else:
        res = BuiltinGenerationAgent().synthesize(args.problem.read_text(), args.target, problem_name=args.problem.stem)
        if res.program is None:
            print(f"the built-in cannot write {args.problem.name}: {res.error}")
            return 2
        source = res.program
    runs = []
    for i in range(args.runs):
        marks: list[tuple[float, str]] = []
        t0 = time.perf_counter()
        v = evaluate(problem, source, args.target, EvalOptions(baselines=args.baselines),
                     on_stage=lambda st: marks.append((time.perf_counter() - t0, str(st.get("stage")))))
        total = time.perf_counter() - t0
        d = v.to_dict()
        timings = {k: {f: (d.get(k) or {}).get(f) for f in ("median_ms", "min_ms", "max_ms", "trials")}
                   for k in ("candidate", "eager", "compiled") if d.get(k)}
        print(f"run {i + 1}: {d['status']} in {total:.2f} s; " +
              "; ".join(f"{k} {t['median_ms']} ms median over {t['trials']} trials" for k, t in timings.items()),
              flush=True)
        crossed = next((c["detail"].split("; tensors crossed ")[-1] for c in d.get("checks") or []
                        if c.get("name") == "judged out of process" and "tensors crossed" in c.get("detail", "")), "")
        if crossed:
            print(f"   tensors crossed {crossed}")
        for line in timeline(marks, total):
            print("   " + line, flush=True)
        if d["status"] != "correct":
            print(f"   reason: {d.get('reason', '')[:500]}")
        runs.append({"status": d["status"], "total_s": total, "stages": marks, "timings": timings,
                     "crossed": crossed})
    if args.out:
        Path(args.out, f"stage_timeline_{args.problem.stem}.json").write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
