"""The built-in, rule-based synthesizer (no LLM) over the gallery: what it supports and how fast its best is.

For every gallery problem at a size class (CPU: the problems' CPU_SIZES) on a target:
1. functional pass: the built-in generator's first candidate, judged by the real evaluator (timed, profiled);
2. optimization pass, as the loop runs it: the built-in analysis agent reads the best candidate's profile and
   roofline and recommends a move; the generator applies it to the best program; the evaluator judges it; the
   fastest correct candidate is kept (up to --moves steps, stopping when the analysis has nothing left);
3. the best candidate is timed once more next to eager PyTorch and torch.compile (interleaved trials, medians).

Prints one row per problem (supported share, status, candidate / eager / torch.compile medians, speedups, % of the
measured bandwidth floor for memory-bound problems by the timed call and by the kernels' profiled device time (%dev,
GPU targets), the moves kept) and the geometric-mean speedup against the
better of eager and torch.compile over the fusion problems (levels 2 and 3) it supports. Timings are medians on
whatever machine runs this; nothing here asserts a speed.

    python bench/builtin_gallery.py --target cpu [--level 2] [--problem softmax] [--moves 5] [--json out.json]
    python bench/builtin_gallery.py --target cuda --all-moves --json out.json --resume   # one evaluation each
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kforge_core.agents.base import AnalysisRequest, Feedback, GenerationRequest  # noqa: E402
from kforge_core.agents.builtin_analysis import BuiltinAnalysisAgent
from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.schedule import read_marker
from kforge_core.eval.evaluator import EvalOptions, evaluate
from kforge_core.gallery import list_problems  # noqa: E402
from kforge_core.platform import get_platform  # noqa: E402
from kforge_core.problem import load_problem  # noqa: E402


def _request(platform, problem, pass_name: str, iteration: int, previous=None, feedback=None):
    return GenerationRequest(problem_source=problem.source, problem_name=problem.name, spec=platform.spec(),
                             pass_name=pass_name, iteration=iteration, previous_program=previous, feedback=feedback)


def _fmt(x, spec=".3g", none="-"):
    return none if x is None else format(x, spec)


def run_problem(gp, platform, gen, ana, args) -> dict:
    problem = load_problem(gp.path)
    size_class = args.size_class
    step_opts = EvalOptions(size_class=size_class, timing=True, baselines=False, profile=True,
                            timeout_s=args.timeout_s, memory_limit_mb=args.memory_limit_mb,
                            timing_options={"min_trials": 5, "max_trials": 40, "budget_s": args.budget_s})
    row = {"problem": gp.name, "level": gp.level, "status": None, "share": None, "moves": [], "steps": []}
    t0 = time.perf_counter()
    first = gen.generate(_request(platform, problem, "functional", 0))
    report = dict(gen.last_report)
    row["share"] = report.get("share")
    row["summary"] = report.get("summary")
    if first.program is None:
        row["status"] = "unsupported"
        row["reason"] = first.error
        row["share"] = report["in_kernels"] / report["total"] if report.get("total") else 0.0
        return row
    v = evaluate(problem, first.program, platform.name, step_opts)
    row["steps"].append({"move": None, "status": v.status, "ms": v.candidate_ms})
    if v.status != "correct":
        fb = Feedback(status=v.status, reason=v.reason, compile_log=v.compile_log)
        retry = gen.generate(_request(platform, problem, "functional", 1, first.program, fb))
        if retry.program is None:
            row["status"], row["reason"] = v.status, v.reason[:300]
            return row
        v = evaluate(problem, retry.program, platform.name, step_opts)
        row["steps"].append({"move": "conservative", "status": v.status, "ms": v.candidate_ms})
        if v.status != "correct":
            row["status"], row["reason"] = v.status, v.reason[:300]
            return row
        first = retry
    best_code, best = first.program, v
    history = []
    for step in range(1, args.moves + 1):
        analysis = ana.analyze(AnalysisRequest(
            program=best_code, problem_source=problem.source, spec=platform.spec(),
            profile=best.profile, roofline=best.roofline, candidate_ms=best.candidate_ms, eager_ms=best.eager_ms,
            compiled_ms=best.compiled_ms, history=history))
        if not analysis.recommendations:
            break
        rec = analysis.recommendations[0]
        fb = Feedback(status="correct", reason=best.reason, candidate_ms=best.candidate_ms,
                      recommendations=analysis.recommendations)
        res = gen.generate(_request(platform, problem, "optimization", step + 1, best_code, fb))
        if res.program is None:
            history.append({"iteration": step, "tried": rec.title, "outcome": res.error, "status": "no_program"})
            continue
        applied = [m for m in read_marker(res.program)["schedule"] if read_marker(res.program)["schedule"][m]
                   and not read_marker(best_code)["schedule"].get(m)]
        cand = evaluate(problem, res.program, platform.name, step_opts)
        faster = cand.status == "correct" and cand.candidate_ms is not None and best.candidate_ms is not None and \
            cand.candidate_ms < best.candidate_ms
        row["steps"].append({"move": rec.move, "applied": applied, "status": cand.status, "ms": cand.candidate_ms,
                             "kept": faster})
        outcome = f"{cand.status}, {cand.candidate_ms} ms vs {best.candidate_ms} ms" if cand.status == "correct" \
            else f"{cand.status}: {cand.reason[:200]}"
        history.append({"iteration": step, "tried": "; ".join(r.title for r in analysis.recommendations[:1]),
                        "outcome": outcome, "status": cand.status, "candidate_ms": cand.candidate_ms})
        if faster:
            best_code, best = res.program, cand
    final_opts = EvalOptions(size_class=size_class, timing=True, baselines=True, profile=False,
                             timeout_s=args.timeout_s, memory_limit_mb=args.memory_limit_mb,
                             timing_options={"min_trials": 10, "max_trials": 60, "budget_s": 2 * args.budget_s})
    final = evaluate(problem, best_code, platform.name, final_opts)
    _fill_final(row, final, best_code)
    row["wall_s"] = time.perf_counter() - t0
    return row


def full_schedule(platform):
    from kforge_core.synth.schedule import Schedule
    from kforge_core.synth.schedule import order_for

    full = Schedule()
    for move in order_for(platform.device_type):
        full = full.with_move(move)
    return full


def all_moves_problem(gp, platform, gen, args) -> dict:
    """--all-moves: one evaluation per problem, of the candidate with every move applied, with both baselines.

    The loop applies moves one at a time and keeps the fastest; the fully optimized program is one state it can
    reach. Judging only that one costs one evaluation instead of one per move, which is what fits a GPU lease; the
    row says which schedule was measured, and the numbers are the real evaluator's (fresh inputs, cache flush,
    medians, eager and torch.compile timed in the same child).
    """
    problem = load_problem(gp.path)
    t0 = time.perf_counter()
    row = {"problem": gp.name, "level": gp.level, "status": None, "share": None, "moves": [], "steps": []}
    res = gen.synthesize(problem.source, platform.name, full_schedule(platform), problem.name)
    report = dict(gen.last_report)
    row["share"], row["summary"] = report.get("share"), report.get("summary")
    if res.program is None:
        row["status"], row["reason"] = "unsupported", res.error
        row["share"] = report["in_kernels"] / report["total"] if report.get("total") else 0.0
        return row
    # profiled too: the kernels' device time gives the share of the bandwidth floor the kernels reach (the timed
    # call's share also counts host launch work and the synchronize)
    opts = EvalOptions(size_class=args.size_class, timing=True, baselines=True, profile=True,
                       timeout_s=args.timeout_s, memory_limit_mb=args.memory_limit_mb,
                       timing_options={"min_trials": 10, "max_trials": 60, "budget_s": 2 * args.budget_s})
    final = evaluate(problem, res.program, platform.name, opts)
    row["steps"].append({"move": "all", "status": final.status, "ms": final.candidate_ms})
    _fill_final(row, final, res.program)
    row["wall_s"] = time.perf_counter() - t0
    return row


def _fill_final(row: dict, final, program: str) -> None:
    row["status"] = final.status
    if final.status != "correct":
        row["reason"] = final.reason[:300]
        return
    sched = read_marker(program)["schedule"]
    row["moves"] = [m for m in ("fuse", "parallel", "vectorize", "block", "unroll", "warp_reduce") if sched.get(m)]
    row["kernels"] = len(read_marker(program)["kernels"])
    row["candidate_ms"], row["eager_ms"], row["compiled_ms"] = final.candidate_ms, final.eager_ms, final.compiled_ms
    row["vs_eager"] = final.speedup_vs_eager
    row["vs_compiled"] = final.speedup_vs_compiled
    base = min(x for x in (final.eager_ms, final.compiled_ms) if x) if (final.eager_ms or final.compiled_ms) else None
    row["vs_best_baseline"] = base / final.candidate_ms if base and final.candidate_ms else None
    roof = final.roofline or {}
    row["bound"] = roof.get("bound")
    row["pct_bandwidth"] = roof.get("pct_of_roofline") if roof.get("bound") == "memory" else None
    row["pct_bandwidth_device"] = roof.get("pct_of_roofline_device") if roof.get("bound") == "memory" else None
    row["device_ms"] = roof.get("device_ms")


def check_problem(gp, platform, gen, args) -> dict:
    """--check: correctness only (no timing) of the first candidate and of the one with every move applied."""
    from kforge_core.synth.schedule import Schedule

    problem = load_problem(gp.path)
    opts = EvalOptions(size_class=args.size_class, timing=False, timeout_s=args.timeout_s,
                       memory_limit_mb=args.memory_limit_mb)
    row = {"problem": gp.name, "level": gp.level, "checks": []}
    full = full_schedule(platform)
    for label, sched in (("first", Schedule()), ("all moves", full)):
        res = gen.synthesize(problem.source, platform.name, sched, problem.name)
        row["share"] = gen.last_report.get("share")
        if res.program is None:
            row["checks"].append((label, "unsupported", res.error[:160]))
            continue
        t = time.perf_counter()
        v = evaluate(problem, res.program, platform.name, opts)
        detail = f"{time.perf_counter() - t:.1f}s max_abs_err={_fmt(v.max_abs_error)}"
        if v.status != "correct":
            detail += f" {v.reason[:300]} {v.compile_log[:600]}"
        row["checks"].append((label, v.status, detail))
    return row


def ab_problem(gp, platform, gen, args) -> dict:
    """--ab: the fully optimized built-in candidate, eager and torch.compile timed interleaved in this process.

    Same inputs, same moment, round-robin: on a machine shared with other jobs this is steadier than comparing
    numbers from separate evaluation processes. Candidate and problem code run in this process (the candidate is
    the built-in generator's own output, the problem a gallery file); the real evaluator judged the same programs.
    """
    import statistics
    import types

    import torch

    from kforge_core.gallery import load_module

    row = {"problem": gp.name, "level": gp.level}
    full = full_schedule(platform)
    res = gen.synthesize(gp.source, platform.name, full, gp.name)
    row["share"] = gen.last_report.get("share")
    if res.program is None:
        row["status"], row["reason"] = "unsupported", res.error
        return row
    mod = load_module(gp.path, args.size_class or "gpu")
    device = platform.device()
    torch.manual_seed(0)
    init = mod.get_init_inputs()
    ref = mod.Model(*init).to(device)
    cand_mod = types.ModuleType(f"kf_ab_{gp.path.stem}")
    exec(compile(res.program, f"<builtin {gp.name}>", "exec"), cand_mod.__dict__)  # noqa: S102 - our own output
    cand = cand_mod.ModelNew(*init).to(device)
    cand.load_state_dict(ref.state_dict())
    models = {"eager": ref, "compiled": torch.compile(ref), "candidate": cand}
    torch.manual_seed(1)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    times = {k: [] for k in models}
    with torch.no_grad():
        want = ref(*inputs)
        got = cand(*inputs)
        ok = all(torch.allclose(g.float(), w.float(), atol=1e-2 if w.dtype != torch.float32 else 1e-4, rtol=1e-4)
                 for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple)
                                 else (want,)))
        for m in models.values():
            for _ in range(3):
                m(*inputs)
        for _ in range(args.rounds):
            for name, m in models.items():
                platform.synchronize()
                t0 = time.perf_counter()
                m(*inputs)
                platform.synchronize()
                times[name].append((time.perf_counter() - t0) * 1e3)
    row["status"] = "correct" if ok else "incorrect"
    for name, v in times.items():
        row[f"{name}_ms"] = statistics.median(v)
        row[f"{name}_min_ms"] = min(v)
    row["kernels"] = len(read_marker(res.program)["kernels"])
    row["moves"] = [m for m in ("fuse", "parallel", "vectorize", "block", "unroll") if full.to_dict().get(m)]
    row["vs_eager"] = row["eager_ms"] / row["candidate_ms"]
    row["vs_compiled"] = row["compiled_ms"] / row["candidate_ms"]
    row["vs_best_baseline"] = min(row["eager_ms"], row["compiled_ms"]) / row["candidate_ms"]
    return row


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def print_table(rows, platform) -> None:
    head = (f"{'problem':38} {'share':>5} {'status':>11} {'kern':>4} {'cand ms':>9} {'eager ms':>9} {'comp ms':>9} "
            f"{'vs eager':>8} {'vs comp':>8} {'%bw':>5} {'%dev':>5}  moves kept")
    print(head)
    print("-" * len(head))
    for r in rows:
        share = f"{100 * r['share']:.0f}%" if r.get("share") is not None else "-"
        print(f"{r['problem']:38} {share:>5} {r['status']:>11} {_fmt(r.get('kernels'), 'd'):>4} "
              f"{_fmt(r.get('candidate_ms')):>9} {_fmt(r.get('eager_ms')):>9} {_fmt(r.get('compiled_ms')):>9} "
              f"{_fmt(r.get('vs_eager'), '.2f'):>8} {_fmt(r.get('vs_compiled'), '.2f'):>8} "
              f"{_fmt(r.get('pct_bandwidth'), '.0f'):>5} {_fmt(r.get('pct_bandwidth_device'), '.0f'):>5}  "
              f"{','.join(r.get('moves') or []) or '-'}")
    for r in rows:
        if r.get("reason"):
            print(f"  {r['problem']}: {r['reason'][:220]}")
    fusion = [r for r in rows if r["level"] >= 2 and r["status"] == "correct"]
    allc = [r for r in rows if r["status"] == "correct"]
    g = geomean([r.get("vs_best_baseline") for r in fusion])
    g_all = geomean([r.get("vs_best_baseline") for r in allc])
    g_e = geomean([r.get("vs_eager") for r in allc])
    print()
    print(f"device: {platform.device_name()}")
    print(f"supported (correct candidate): {len(allc)} of {len(rows)} problems")
    print(f"geomean speedup vs the better of eager and torch.compile, fusion problems (levels 2-3) supported "
          f"({len(fusion)}): {_fmt(g, '.2f')}x")
    print(f"geomean speedup vs the better of eager and torch.compile, all supported ({len(allc)}): "
          f"{_fmt(g_all, '.2f')}x; vs eager: {_fmt(g_e, '.2f')}x")
    for key, how in (("pct_bandwidth", "timed call (wall clock)"), ("pct_bandwidth_device", "kernels' device time")):
        mem = sorted(r[key] for r in allc if r.get(key) is not None)
        if mem:
            print(f"memory-bound problems supported ({len(mem)}), % of measured bandwidth by the {how}: median "
                  f"{mem[len(mem) // 2]:.0f}, min {mem[0]:.0f}, max {mem[-1]:.0f}; at or above 80 %: "
                  f"{sum(x >= 80 for x in mem)} of {len(mem)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--size-class", default=None, help="default: cpu for the CPU target, the files' sizes otherwise")
    ap.add_argument("--level", type=int, default=None)
    ap.add_argument("--problem", action="append", default=[], help="substring filter (repeatable)")
    ap.add_argument("--moves", type=int, default=5, help="optimization steps per problem")
    ap.add_argument("--budget-s", type=float, default=1.0, help="timing budget per evaluation")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--memory-limit-mb", type=int, default=16384,
                    help="host memory limit of each evaluation (the files' GPU sizes need more than the default)")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--check", action="store_true", help="correctness only: first and fully optimized candidates")
    ap.add_argument("--ab", action="store_true", help="in-process interleaved timing of the fully optimized "
                                                       "candidate against eager and torch.compile (no loop)")
    ap.add_argument("--all-moves", action="store_true", help="no loop: one evaluation per problem of the candidate "
                                                            "with every move applied (with both baselines)")
    ap.add_argument("--rounds", type=int, default=20, help="--ab: timed rounds per model")
    ap.add_argument("--resume", action="store_true", help="with --json: keep the rows already there, skip their "
                                                          "problems")
    ap.add_argument("--time-limit-s", type=float, default=None,
                    help="start no new problem after this many seconds (the rows so far are kept and printed)")
    args = ap.parse_args(argv)
    if args.resume and not args.json:
        ap.error("--resume needs --json (the file whose rows to keep)")
    platform = get_platform(args.target, require_available=True)
    if args.size_class is None:
        args.size_class = "cpu" if platform.device_type == "cpu" else None
    gen = BuiltinGenerationAgent(size_class=args.size_class)
    ana = BuiltinAnalysisAgent()
    rows = []
    if args.resume and Path(args.json).exists():
        rows = json.loads(Path(args.json).read_text())
        print(f"resuming: {len(rows)} problem(s) already in {args.json}", flush=True)
    done = {r["problem"] for r in rows}
    started = time.perf_counter()
    for gp in list_problems(args.level):
        if args.problem and not any(s in gp.name for s in args.problem):
            continue
        if gp.name in done:
            continue
        if args.time_limit_s is not None and time.perf_counter() - started > args.time_limit_s:
            print(f"time limit ({args.time_limit_s:g} s) reached: {gp.name} and later problems not started; "
                  f"run again with --resume to go on", flush=True)
            break
        if args.check:
            row = check_problem(gp, platform, gen, args)
            for label, status, detail in row["checks"]:
                print(f"{gp.name:40s} {label:10s} {status:12s} {detail}", flush=True)
            rows.append(row)
            continue
        try:
            one = ab_problem if args.ab else (all_moves_problem if args.all_moves else None)
            row = one(gp, platform, gen, args) if one else run_problem(gp, platform, gen, ana, args)
        except Exception as e:  # noqa: BLE001 - one problem's failure must not end the bench
            row = {"problem": gp.name, "level": gp.level, "status": "error", "reason": f"{type(e).__name__}: {e}"}
        rows.append(row)
        steps = [(s.get("move"), s["status"], _fmt(s.get("ms"))) for s in row.get("steps", [])]
        print(f"[{len(rows)}] {row['problem']}: {row['status']} {_fmt(row.get('candidate_ms'))} ms (eager "
              f"{_fmt(row.get('eager_ms'))}, compiled {_fmt(row.get('compiled_ms'))}); steps {steps}", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    if args.check:
        bad = [(r["problem"], c) for r in rows for c in r["checks"] if c[1] not in ("correct", "unsupported")]
        print(f"\n{len(bad)} failing check(s)")
        return 1 if bad else 0
    print()
    print_table(rows, platform)
    return 0


if __name__ == "__main__":
    sys.exit(main())
