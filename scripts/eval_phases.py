"""Where an evaluation's time goes: one GELU problem at a given size (default 16384 x 32768 fp32, 2 GiB in and
2 GiB out), evaluate() with each stage's time since the start and since the stage before, --runs times (the first
pays the children's start). The judge and the candidate run in processes of their own, out of a profiler's reach
here: for where the time goes inside them, run this under `py-spy record --subprocesses` (docs/EVALUATOR.md).

    python scripts/eval_phases.py [--batch 16384 --dim 32768] [--target cuda] [--runs 2]
"""
import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from eval_footprint import CPU_CANDIDATE, CUDA_CANDIDATE, PROBLEM  # noqa: E402

from kforge_core.eval.evaluator import EvalOptions, evaluate  # noqa: E402
from kforge_core.problem import load_problem  # noqa: E402


def staged(problem, candidate, target, options):
    t0 = time.perf_counter()
    last = [t0]

    def on_stage(d):
        now = time.perf_counter()
        print(f"  {now - t0:7.2f}  +{now - last[0]:6.2f}  {d.get('stage')}", flush=True)
        last[0] = now
    v = evaluate(problem, candidate, target, options, on_stage=on_stage)
    print(f"  {time.perf_counter() - t0:7.2f}  verdict {v.status}: {v.reason[:160]}", flush=True)
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16384)
    ap.add_argument("--dim", type=int, default=32768)
    ap.add_argument("--target", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    cand = CUDA_CANDIDATE if a.target == "cuda" else CPU_CANDIDATE
    problem = load_problem(text=PROBLEM.format(batch=a.batch, dim=a.dim), name="gelu_phases")
    opts = EvalOptions(timing=True, baselines=False)
    for i in range(a.runs):
        print(f"== run {i + 1}, judged={os.environ.get('KFORGE_JUDGE', '1')}", flush=True)
        staged(problem, cand, a.target, opts)


if __name__ == "__main__":
    main()
