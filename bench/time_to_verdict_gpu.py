"""Time to verdict on the GPU targets: full `evaluate()` calls (child start to verdict: build, 5 seeds of correctness
checks, timing of candidate and eager reference), median of --runs, for

  (a)  NVRTC candidate, cold compile   platforms/examples/cuda/candidate.py, a unique token in its kernel source
  (a') NVRTC candidate, cached         the same file unchanged (cache warmed first)
  (b)  load_inline, cold build         bench/fixtures/cuda_load_inline.py, a unique token in its source (nvcc)
  (c)  load_inline, cached build       the fixture unchanged (cache warmed first)
  (d)  Triton candidate, cold JIT      platforms/examples/triton/candidate.py, a unique comment in the kernel
  (d') Triton candidate, cached        the same file unchanged (Triton's cache warmed first); an isolated child's
                                       Triton cache is its own since 2026-11-27 (docs/EVALUATOR.md), so (d') is
                                       a JIT compile every time there, like (d); only without isolation it is cached
  (af) as (a), plus the torch.compile baseline (EvalOptions() defaults, as bench/time_to_verdict.py times): the
       run's warm baseline server (built once, in the warm-up)
  (af0) as (af), the way it was before: torch.compile built again in every evaluation child
       (`--cases af0,af` gives the before/after side by side)
  (a2s), (d2s) as (a'), (d'), the two children spawned (`KFORGE_EVAL_SPAWN=1`: a fresh Python, torch import and
       CUDA context each, as before GPU children came from the fork server)
  (a2f), (d2f) as (a'), (d'), the two children forked on demand from the "cuda" fork server (`KFORGE_EVAL_POOL=0`:
       no pre-started children)
  (a'), (d') themselves take the pre-started, warmed pair (`kforge_core.eval.warm_pool`); `--cases
       a2s,a2f,a2,d2s,d2f,d2` gives before (spawned), forked and pre-started side by side; their runs interleave
       (round-robin), so the card's and the host's load hit every variant alike

    python bench/time_to_verdict_gpu.py [--runs 5] [--cases a,a2,b,c,d,d2,af] [--baselines] [--think S] [--out DIR]

--think S pauses S seconds before each timed evaluation, as a run does while its model writes the next candidate:
the pool starts a used child's replacement only once the evaluation has ended (never beside its timed calls), so
evaluations back to back (the default, S = 0) find no pre-started child waiting and fork theirs on demand.

The torch.compile baseline is off by default here (--baselines turns it on for every case): it costs the same for
every candidate of a problem, whatever its format, and would only add a constant to each row. Cold variants get a
fresh hash per run, so only the candidate's build is cold: torch.compile's cache, the measured ceilings and the
child's imports are warm for every variant alike (one warm-up evaluation first, not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kforge_core.eval.evaluator import EvalOptions, evaluate
from kforge_core.platform import get_platform  # noqa: E402
from kforge_core.problem import load_problem  # noqa: E402

EXAMPLES = ROOT / "platforms" / "examples"


def _nvrtc(token: str | None) -> str:
    src = (EXAMPLES / "cuda" / "candidate.py").read_text()
    return src if token is None else src.replace('SOURCE = r"""', f'SOURCE = r"""// {token}', 1)


def _inline(token: str | None) -> str:
    src = (ROOT / "bench" / "fixtures" / "cuda_load_inline.py").read_text()
    return src if token is None else src.replace('CUDA_SOURCE = r"""', f'CUDA_SOURCE = r"""// {token}', 1)


def _triton(token: str | None) -> str:
    src = (EXAMPLES / "triton" / "candidate.py").read_text()
    marker = "    pid = tl.program_id(0)\n"
    return src if token is None else src.replace(marker, f"    # {token}\n{marker}", 1)


CASES = {  # key: (label, target, source maker, cold?, torch.compile baseline forced on?)
    "a": ("(a) NVRTC candidate, cold compile", "cuda", _nvrtc, True, False),
    "a2": ("(a') NVRTC candidate, cached", "cuda", _nvrtc, False, False),
    "b": ("(b) load_inline, cold build", "cuda", _inline, True, False),
    "c": ("(c) load_inline, cached build", "cuda", _inline, False, False),
    "d": ("(d) Triton candidate, cold JIT", "triton", _triton, True, False),
    "d2": ("(d') Triton candidate, cached", "triton", _triton, False, False),
    "af": ("(af) NVRTC cold + torch.compile baseline", "cuda", _nvrtc, True, True),
    # before the run's baseline was shared: every evaluation child compiles torch.compile itself
    "af0": ("(af0) as (af), torch.compile in every child (before)", "cuda", _nvrtc, True, True),
    # before the judge split: the candidate judged in its own process (docs/EVALUATOR.md)
    "a20": ("(a'0) as (a'), judged in the candidate's process (before)", "cuda", _nvrtc, False, False),
    "d20": ("(d'0) as (d'), judged in the candidate's process (before)", "triton", _triton, False, False),
    # before GPU children were forked: both spawned; then forked on demand, without the warm pool
    "a2s": ("(a's) as (a'), children spawned (before)", "cuda", _nvrtc, False, False),
    "a2f": ("(a'f) as (a'), children forked on demand (pool off)", "cuda", _nvrtc, False, False),
    "d2s": ("(d's) as (d'), children spawned (before)", "triton", _triton, False, False),
    "d2f": ("(d'f) as (d'), children forked on demand (pool off)", "triton", _triton, False, False),
    # the CPU's shorter warm-up (1-3 calls a model: the checked seeds ran both sides) and budget, tried on the GPU
    "a2w": ("(a'w) as (a'), warm-up 1-3 calls", "cuda", _nvrtc, False, False),
    "a2b": ("(a'b) as (a'), warm-up 1-3 calls and a 1 s budget", "cuda", _nvrtc, False, False),
}
CASE_TIMING = {  # timing options that differ from the platform's defaults
    "a2w": {"warmup_min": 1, "warmup_max": 3},
    "a2b": {"warmup_min": 1, "warmup_max": 3, "budget_s": 1.0},
}
AFTER = {"KFORGE_SHARED_BASELINE": "1", "KFORGE_JUDGE": "1", "KFORGE_EVAL_SPAWN": "0", "KFORGE_EVAL_POOL": "1"}
CASE_ENV = {  # what differs from today's defaults (AFTER) for the "before" cases
    "af0": {"KFORGE_SHARED_BASELINE": "0"},
    "a20": {"KFORGE_JUDGE": "0"}, "d20": {"KFORGE_JUDGE": "0"},
    "a2s": {"KFORGE_EVAL_SPAWN": "1"}, "d2s": {"KFORGE_EVAL_SPAWN": "1"},
    "a2f": {"KFORGE_EVAL_POOL": "0"}, "d2f": {"KFORGE_EVAL_POOL": "0"},
}


_PROFILED_CHILD = r"""
import cProfile, os, sys
prof = cProfile.Profile()
real_exit = os._exit
def _exit(code):
    from kforge_core.eval.harness import guards
    with guards.trusted():  # switching the profiler off is audited (sys.setprofile)
        prof.disable()
        prof.dump_stats(sys.argv[1])
    real_exit(code)
os._exit = _exit
prof.enable()
from kforge_core.eval.harness import child
child.main()
"""


def _breakdown(problem_path: Path, source: str, target: str, out: str | None, baselines: bool) -> str:
    """One evaluation child run under cProfile (same request and environment as evaluate()): where the time goes."""
    import dataclasses
    import pstats
    from kforge_core import tempdirs
    from kforge_core.eval.child_setup import child_environment

    workdir = tempdirs.make("breakdown-")
    (workdir / "problem.py").write_text(problem_path.read_text())
    (workdir / "candidate.py").write_text(source)
    opts = {k: v for k, v in dataclasses.asdict(EvalOptions(baselines=baselines)).items()
            if k not in ("timeout_s", "memory_limit_mb")}
    request = {"mode": "evaluate", "target": target, **opts, "nonce": uuid.uuid4().hex, "workdir": str(workdir)}
    prof_path = workdir / "child.prof"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", _PROFILED_CHILD, str(prof_path)], input=json.dumps(request).encode(),
                   cwd=workdir, env=child_environment(workdir), capture_output=True, timeout=600)
    wall = time.perf_counter() - t0
    buf = __import__("io").StringIO()
    stats = pstats.Stats(str(prof_path), stream=buf)
    stats.sort_stats("cumulative").print_stats(45)
    text = f"child wall {wall:.2f} s (profiled, so slower than unprofiled)\n" + buf.getvalue()
    if out:
        Path(out, "breakdown.txt").write_text(text)
    return text


def _counts(statuses: list[str]) -> str:
    return ", ".join(f"{s} x{statuses.count(s)}" for s in sorted(set(statuses)))


def _child_floor(n: int = 3) -> float:
    """Seconds for a bare `python -c 'import torch; CUDA init'`: the floor any child-per-candidate design pays."""
    code = "import torch; torch.empty(1, device='cuda'); torch.cuda.synchronize()"
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _report(rows: dict, device: str, opts, args, floor: float) -> str:
    base_key = "a" if "a" in rows else next(iter(rows))
    base = statistics.median(rows[base_key]["walls"])
    lines = [f"Time to verdict on {device}: full evaluate() (5 seeds, timing of candidate and eager, torch.compile "
             f"baseline {'on' if opts.baselines else 'off unless noted'}), {args.runs} runs each, library calls, "
             f"{f'{args.think:g} s between evaluations (a model writing)' if args.think else 'back to back'}; "
             f"bare child floor (python + import torch + CUDA context) {floor:.2f} s",
             "", f"| variant | median s | min s | max s | candidate build s (median) | vs {base_key} | "
                 f"pre-started children per run | verdicts |",
             "|---|---|---|---|---|---|---|---|"]
    for key, row in rows.items():
        med = statistics.median(row["walls"])
        lines.append(f"| {row['label']} | {med:.2f} | {min(row['walls']):.2f} | {max(row['walls']):.2f} | "
                     f"{statistics.median(row['builds']):.3f} | {med / base:.2f}x | "
                     f"{statistics.median(row['pre_started']):g} | {_counts(row['statuses'])} |")
    if "a" in rows and "b" in rows:
        lines.append(f"\n(b)/(a) = {statistics.median(rows['b']['walls']) / base:.1f}x  (goal: (a) <= 1.5 s and "
                     f"(b)/(a) >= 10x)")
    for slow, fast, what in (("a2s", "a2", "NVRTC"), ("a2f", "a2", "NVRTC"), ("d2s", "d2", "Triton"),
                             ("d2f", "d2", "Triton")):
        if slow in rows and fast in rows:
            ratio = statistics.median(rows[slow]["walls"]) / statistics.median(rows[fast]["walls"])
            lines.append(f"{what}: {rows[slow]['label'].split(' ', 1)[0]} / {rows[fast]['label'].split(' ', 1)[0]}"
                         f" = {ratio:.2f}x")
    lines.append(f"fork server and pool: {_pool_state()}")
    table = "\n".join(lines)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "time_to_verdict_gpu.json").write_text(json.dumps(
            {"device": device, "baselines": opts.baselines, "runs": args.runs, "think_s": args.think,
             "child_floor_s": floor, "rows": rows},
            indent=1))
        Path(args.out, "time_to_verdict_gpu.md").write_text(table + "\n")
    return table


def _pool_state() -> str:
    """Which fork servers run (a "cuda" one that refused to start is absent: its children were spawned) and what
    the pool did."""
    from kforge_core.eval import forkserver, warm_pool

    servers = [f"{s.device}{' (retired)' if s.retired else ''}{' (dead)' if s.dead else ''}"
               for s in forkserver._servers.values()]
    return f"servers {servers or 'none'}; not used: {forkserver.failures() or 'none'}; pool {dict(warm_pool.STATS)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cases", default="a,a2s,a2f,a2,a20,b,c,d,d2s,d2f,d2,d20")
    ap.add_argument("--baselines", action="store_true", help="time the torch.compile baseline in every case")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="directory for the JSON results")
    ap.add_argument("--breakdown", action="store_true", help="first profile one NVRTC evaluation child (cProfile)")
    ap.add_argument("--think", type=float, default=0.0,
                    help="seconds between evaluations, as a model's reply time in a run (default 0: back to back)")
    args = ap.parse_args()
    keys = [k.strip() for k in args.cases.split(",") if k.strip()]
    opts = EvalOptions(baselines=args.baselines)
    problems = {t: load_problem(path=EXAMPLES / t / "problem.py") for t in ("cuda", "triton")}
    device = get_platform("cuda", require_available=True).device_name()
    print(f"device: {device}; options: baselines={opts.baselines}, seeds={opts.seeds}", flush=True)
    floor = _child_floor()
    print(f"bare child floor (python + import torch + CUDA context): {floor:.2f} s", flush=True)
    if args.breakdown:
        evaluate(problems["cuda"], _nvrtc(None), "cuda", EvalOptions(baselines=False))  # warm caches first
        text = _breakdown(EXAMPLES / "cuda" / "problem.py", _nvrtc(f"breakdown {uuid.uuid4().hex}"), "cuda",
                          args.out, opts.baselines)
        print("\n".join(text.splitlines()[:60]), flush=True)

    stages: dict[str, list] = {}  # per case: the last run's stages, (seconds since its start, stage)

    def run(target: str, source: str, baselines: bool, key: str = "") -> tuple[float, dict]:
        t0 = time.perf_counter()
        seen = stages[key] = []
        v = evaluate(problems[target], source, target, EvalOptions(baselines=opts.baselines or baselines,
                                                                   timing_options=CASE_TIMING.get(key, {})),
                     on_stage=lambda st: seen.append((time.perf_counter() - t0, st.get("stage"))))
        return time.perf_counter() - t0, v.to_dict()

    from kforge_core.eval import warm_pool

    def setenv(key: str) -> None:
        os.environ.update({**AFTER, **CASE_ENV.get(key, {})})

    rows: dict[str, dict] = {}
    warmed = set()
    for key in keys:  # warm-ups, not counted: torch.compile cache, ceilings, the unchanged source's build, and
        label, target, make, cold, baselines = CASES[key]  # each variant's fork server and pool
        setenv(key)
        if (target, make, baselines, json.dumps(CASE_ENV.get(key))) not in warmed:
            wall, r = run(target, make(None), baselines, key)
            warmed.add((target, make, baselines, json.dumps(CASE_ENV.get(key))))
            print(f"  warm-up {key} {target}/{make.__name__}: {wall:.2f} s ({r['status']})", flush=True)
        rows[key] = {"label": label, "walls": [], "builds": [], "torch_compile_s": [], "child_wall_s": [],
                     "pre_started": [], "statuses": [], "reasons": []}
    table = ""
    for _ in range(args.runs):  # round-robin: every variant sees the same stretch of the machine's load
        for key in keys:
            label, target, make, cold, baselines = CASES[key]
            setenv(key)
            time.sleep(args.think)  # not counted
            handed = warm_pool.STATS["handed_off"]
            wall, r = run(target, make(f"kforge bench {uuid.uuid4().hex}" if cold else None), baselines, key)
            row = rows[key]
            row["walls"].append(wall)
            row["builds"].append(r.get("build_s") or 0.0)
            row["child_wall_s"].append(r.get("wall_s") or 0.0)
            row["torch_compile_s"].append(r.get("torch_compile_s") or 0.0)
            row["pre_started"].append(warm_pool.STATS["handed_off"] - handed)
            row["statuses"].append(r["status"])
            if r["status"] != "correct":
                row["reasons"].append(r["reason"][:300])
            print(f"    {label}: {wall:.2f} s, build {row['builds'][-1]:.3f} s, "
                  f"{row['pre_started'][-1]} pre-started ({r['status']})", flush=True)
        table = _report(rows, device, opts, args, floor)  # written after every round: a cut-off run keeps its rows
    print("\n" + table)
    for key in keys:  # where one evaluation's time went: when each stage began (the last run of each case)
        marks = stages.get(key) or []
        print(f"stages of the last {key} run: " + ", ".join(f"{t:.2f} s {name}" for t, name in marks)
              + f", verdict {rows[key]['walls'][-1]:.2f} s" if rows[key]["walls"] else "")

    bad = [r for r in rows.values() if any(s != "correct" for s in r["statuses"])]
    for r in bad:
        print(f"NOT CORRECT: {r['label']}: {r['reasons'][:2]}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
