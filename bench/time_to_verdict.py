"""Time to verdict: the full `evaluate` (all seeds, timing, eager + torch.compile baselines) for
(a) a ctypes C++ candidate, (b) the same kernel as a cold `load_inline` build, (c) a cached `load_inline` rebuild,
(a0) the ctypes candidate the way every evaluation ran before the run's torch.compile baseline was shared
(`KFORGE_SHARED_BASELINE=0`: each child compiles its own baseline, inductor's caches warm), (a1) the ctypes
candidate judged in its own process as before the judge split (`KFORGE_JUDGE=0`, docs/EVALUATOR.md), and (ap0) the
ctypes candidate with its two children forked on demand instead of pre-started (`KFORGE_EVAL_POOL=0`, as before the
warm pool, `kforge_core.eval.warm_pool`), and (at) the ctypes candidate with the CPU's timing options before
2026-11-26 (a 2 s budget, 3-7 warm-up calls): before and after, side by side in one run, their runs interleaved so that
the machine's load hits both alike.

    python bench/time_to_verdict.py --target cpu [--runs 5] [--cli] [--variants ap0,a] [--think S]

--think S pauses S seconds before each timed evaluation, as a run does while its model writes the next candidate:
the warm pool starts a used child's replacement only once the evaluation has ended (never beside its timed calls),
so evaluations back to back (S = 0, the default) find no pre-started child waiting and fork theirs on demand.

Each variant runs `--runs` times; the table prints median/min/max wall seconds and ratios measured side by side in
this one run. By default the evaluations are made through the library (`kforge_core.eval.evaluator.evaluate`, as the loop
and the app do); `--cli` times `python -m kforge_core evaluate ... --json` processes instead (adds the CLI's own
start-up). Cold builds are made cold by a unique comment inside the kernel source (a new hash), so torch.compile's cache
stays warm for every variant and only the candidate's build differs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kforge_core.eval import warm_pool  # noqa: E402
from kforge_core.eval.evaluator import EvalOptions, evaluate  # noqa: E402
from kforge_core.platform import get_platform  # noqa: E402
from kforge_core.problem import load_problem  # noqa: E402


AFTER = {"KFORGE_SHARED_BASELINE": "1", "KFORGE_JUDGE": "1", "KFORGE_EVAL_POOL": "1"}  # today's defaults


# the CPU's timing options until 2026-11-26 (today's: the target's own, `timing.options_for`)
BEFORE_TIMING = {"budget_s": 2.0, "warmup_min": 3, "warmup_max": 7}


def _evaluate(problem_path: Path, candidate: str, target: str, use_cli: bool,
              env: dict | None = None, timing: dict | None = None) -> tuple[float, dict]:
    os.environ.update({**AFTER, **(env or {})})  # read at each evaluation (and by the CLI)
    start = time.perf_counter()
    if use_cli:
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(candidate)
        out = subprocess.run([sys.executable, "-m", "kforge_core", "evaluate", "--problem", str(problem_path),
                              "--candidate", f.name, "--target", target, "--json"], capture_output=True, text=True,
                             cwd=ROOT)
        os.unlink(f.name)
        result = json.loads(out.stdout)
    else:
        verdict = evaluate(load_problem(path=problem_path), candidate, target, EvalOptions(timing_options=timing or {}))
        result = verdict.to_dict()
    return time.perf_counter() - start, result


def _spread(t: dict) -> str:
    return f"{t['median_ms']:.3f} ms ({t['min_ms']:.3f}-{t['max_ms']:.3f}, {t['trials']} trials)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cli", action="store_true", help="time CLI processes instead of library calls")
    ap.add_argument("--variants", default="a0,a1,ap0,a,b,c",
                    help="which variants to run (their letters), e.g. a1,a for the judge's cost alone, ap0,a for "
                         "the warm pool's")
    ap.add_argument("--think", type=float, default=0.0,
                    help="seconds between evaluations, as a model's reply time in a run (default 0: back to back)")
    args = ap.parse_args()
    chosen = {v.strip() for v in args.variants.split(",") if v.strip()} | {"a"}  # (a) is every ratio's base
    if args.cli and "at" in chosen:
        ap.error("variant at sets timing options, which the CLI's evaluate takes only as flags: run it without --cli")

    platform = get_platform(args.target, require_available=True)
    example = platform.example()
    ctypes_src = example.candidate.read_text()
    inline_path = ROOT / "bench" / "fixtures" / f"{args.target}_load_inline.py"
    if not inline_path.exists():
        print(f"no load_inline fixture for {args.target} ({inline_path})", file=sys.stderr)
        return 2
    inline_src = inline_path.read_text()
    def with_token(token: str) -> str:  # a token inside the kernel source changes its hash: a cold build
        return inline_src.replace('CPP_SOURCE = r"""', f'CPP_SOURCE = r"""// {token}', 1)

    cached_src = with_token(f"cache key {uuid.uuid4().hex}")

    print(f"device: {platform.device_name()}; warming caches (torch.compile, ceilings, one cached build)...",
          flush=True)
    _evaluate(example.problem, ctypes_src, args.target, args.cli)  # ceilings measured: the children's plan settles
    if "c" in chosen:
        _evaluate(example.problem, cached_src, args.target, args.cli)

    variants = {
        "(a0) ctypes, torch.compile in every child (before)": (lambda: ctypes_src, {"KFORGE_SHARED_BASELINE": "0"}),
        "(a1) ctypes, judged in the candidate's own process (KFORGE_JUDGE=0, before the judge)":
            (lambda: ctypes_src, {"KFORGE_JUDGE": "0"}),
        "(ap0) ctypes, children forked on demand (KFORGE_EVAL_POOL=0, before the warm pool)":
            (lambda: ctypes_src, {"KFORGE_EVAL_POOL": "0"}),
        "(at) ctypes, a 2 s budget and 3-7 warm-up calls (before, on the CPU)": (lambda: ctypes_src, {},
                                                                                BEFORE_TIMING),
        "(a) ctypes C++ candidate": (lambda: ctypes_src, {}),
        "(b) load_inline, cold build": (lambda: with_token(f"cold {uuid.uuid4().hex}"), {}),
        "(c) load_inline, cached build": (lambda: cached_src, {}),
    }
    variants = {name: v for name, v in variants.items() if name[1:name.index(")")] in chosen}
    for env in {json.dumps(v[1], sort_keys=True) for v in variants.values()}:  # each its fork server and pool
        _evaluate(example.problem, ctypes_src, args.target, args.cli, json.loads(env))
    rows = {name: ([], [], set(), []) for name in variants}
    for _ in range(args.runs):  # round-robin: every variant sees the same stretch of machine load
        for name, (make, env, *timing) in variants.items():
            time.sleep(args.think)  # not counted
            handed = warm_pool.STATS["handed_off"]
            wall, result = _evaluate(example.problem, make(), args.target, args.cli, env, *timing)
            result["pre_started"] = warm_pool.STATS["handed_off"] - handed  # children that were waiting
            walls, builds, statuses, timings = rows[name]
            walls.append(wall)
            builds.append(result.get("build_s") or 0.0)
            statuses.add(result["status"])
            timings.append(result)
            print(f"    {name}: {wall:.2f} s ({result['status']}; {result['pre_started']} pre-started children)",
                  flush=True)  # a cut-off run keeps its rows
    for name, (walls, _, statuses, _) in rows.items():
        print(f"  {name}: median {statistics.median(walls):.2f} s ({', '.join(sorted(statuses))})", flush=True)

    def median_of(prefix: str) -> float | None:
        walls = next((rows[name][0] for name in rows if name.startswith(prefix)), None)
        return statistics.median(walls) if walls else None

    base = median_of("(a) ")
    print(f"\nTime to verdict, target {args.target}, {args.runs} runs each, "
          f"{'CLI processes' if args.cli else 'library calls'}, "
          f"{f'{args.think:g} s between evaluations (a model writing)' if args.think else 'back to back'}:")
    print("| variant | median s | min s | max s | candidate build s (median) | vs (a) | verdicts |")
    print("|---|---|---|---|---|---|---|")
    for name, (walls, builds, statuses, _) in rows.items():
        med = statistics.median(walls)
        print(f"| {name} | {med:.2f} | {min(walls):.2f} | {max(walls):.2f} | {statistics.median(builds):.3f} | "
              f"{med / base:.1f}x | {', '.join(sorted(statuses))} |")
    cold, before, alone, forked = median_of("(b)"), median_of("(a0)"), median_of("(a1)"), median_of("(ap0)")
    print()
    if cold is not None:
        print(f"(b)/(a) = {cold / base:.1f}x  (goal: (a) <= 2 s and >= 10x faster than (b))")
    if before is not None:
        print(f"before/after (a0)/(a) = {before / base:.1f}x")
    if alone is not None:
        print(f"the judge's cost: (a) {base:.2f} s judged, (a1) {alone:.2f} s in one process, (a)/(a1) = "
              f"{base / alone:.2f}x")
    if forked is not None:
        print(f"the warm pool: (ap0) {forked:.2f} s forked on demand, (a) {base:.2f} s pre-started, "
              f"(ap0)/(a) = {forked / base:.2f}x")
    print("\nThe timings inside those verdicts (median, min-max, trials; the last run of each variant):")
    for name, (_, _, _, results) in rows.items():
        r = results[-1]
        parts = [f"{k} {_spread(r.get(k))}" for k in ("candidate", "eager", "compiled") if r.get(k)]
        print(f"  {name}: {'; '.join(parts)}" + (f"  [noisy: {', '.join(r['noisy'])}]" if r.get("noisy") else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
