"""Where a GPU evaluation's time goes: one GELU problem at a given size, evaluate() with its stages timestamped,
then the same under cProfile with the judge in this process (KFORGE_JUDGE=0), top functions by own time.

    python scripts/eval_phases.py [--batch 16384 --dim 32768] [--target cuda] [--profile]
"""
import argparse
import cProfile
import os
import pstats
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
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16384)
    ap.add_argument("--dim", type=int, default=32768)
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    cand = CUDA_CANDIDATE if a.target == "cuda" else CPU_CANDIDATE
    problem = load_problem(text=PROBLEM.format(batch=a.batch, dim=a.dim), name="gelu_phases")
    opts = EvalOptions(timing=True, baselines=False)
    for i in range(a.runs):
        print(f"== run {i + 1}, judged={os.environ.get('KFORGE_JUDGE', '1')}", flush=True)
        staged(problem, cand, a.target, opts)
    if a.profile:
        os.environ["KFORGE_JUDGE"] = "0"
        print("== cProfile, judge in this process", flush=True)
        pr = cProfile.Profile()
        pr.enable()
        staged(problem, cand, a.target, opts)
        pr.disable()
        st = pstats.Stats(pr).sort_stats("tottime")
        st.print_stats(25)


if __name__ == "__main__":
    main()
