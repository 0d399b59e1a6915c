"""Does a bench through Ray scale with the GPUs of one host? (issue 28) One command, on an N-GPU machine:

    python scripts/ray_multi_gpu.py                      # every GPU; the gallery and a KernelBench-layout suite
    python scripts/ray_multi_gpu.py --gpus 1,2,8 --kernelbench /path/to/KernelBench/KernelBench
    python scripts/ray_multi_gpu.py --suites gallery --best-of 4   # best-of-k: each candidate a task of its own

For each suite -- the gallery at its GPU sizes, and a directory in KernelBench's layout (level1/, level2/, ...;
default: assets/problems, the gallery's own files read as such a directory, at their own sizes) -- and for each
GPU count (1, 2 and all, by default), it starts a Ray cluster on this host whose one node offers that many GPUs
(Ray then hands each task one of GPUs 0..k-1), runs the built-in agent's bench over the same problems in the same
order through Ray (`--cluster`), and shuts the cluster down. Then it prints, per suite and GPU count: problems per
minute, the speedup over 1 GPU (and its share of linear), the per-task overhead (device time not spent inside a
problem's run: k x bench wall - sum of the runs' own wall time, per problem; it includes the tail, when fewer
problems than GPUs are left), and whether every verdict (status, correct, iterations) equals the 1-GPU run's.
Exit status 1 when a verdict differs. Results (every bench's results.json) go under --out.

Defaults fit a device lease: one functional iteration and no optimization pass per problem, no eager /
torch.compile baselines (timing baselines is not what scales here); pass --full for the loop's own defaults.
Ray must be installed (pip install -r requirements-ray.txt); the script tries that once if it is missing. Within a
10-minute device call, run one suite per call (`--suites gallery`, then `--suites kernelbench`): each bench starts
afresh (its output folder is cleared), the 1-GPU run first, since the others are compared with it. Where even one
suite does not fit a call, split it by GPU count with --reuse and the same --out on the same (warm) machine:
`--gpus 1 --reuse`, then `--gpus 1,2 --reuse`: a GPU count whose finished bench is already in --out (same suite,
target and settings, same kind of device) is read back instead of run again; the others still start afresh. A
device machine goes back soon after a call: carry the finished <suite>-<k>gpu folders to the next one.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _ensure_ray() -> None:
    try:
        importlib.import_module("ray")
    except ImportError:
        print("Ray is missing: pip install -r requirements-ray.txt", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements-ray.txt")],
                       check=False)
        importlib.invalidate_caches()
        try:
            importlib.import_module("ray")
        except ImportError:
            sys.exit("Ray could not be installed here; install requirements-ray.txt and run this again")


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _bench(suite: str, out: Path, gpus: int, args, size_class: str | None, device: str) -> dict:
    from kforge_core.bench.ray_driver import RayExecutor
    from kforge_core.bench.ray_local import local_cluster
    from kforge_core.bench.runner import BenchConfig, run_bench

    iters = {} if args.full else {"max_functional_iters": 1, "max_optimization_iters": 0}
    cfg = BenchConfig(suite=suite, target=args.target, out_dir=out, agent="builtin", db_path=str(out / "runs.db"),
                      level=args.level, size_class=size_class, eval_baselines=args.full, best_of_k=args.best_of,
                      **iters)
    # --target cpu (a trial of this script on a machine without GPUs): k CPU slots stand in for k GPUs
    node = {"num_gpus": 0, "num_cpus": gpus} if args.target == "cpu" else {"num_gpus": gpus, "num_cpus": gpus}
    with local_cluster([node], object_store_mb=512) as cluster:
        cfg.cluster = cluster.address
        start = time.perf_counter()
        summary = run_bench(cfg, progress=lambda s: print(f"    {s}", flush=True),
                            executor=RayExecutor(cluster.address))
        wall = time.perf_counter() - start
    records = json.loads((out / "results.json").read_text())["problems"]
    run = {"gpus": gpus, "wall_s": wall, "records": records, "summary": summary, "settings": _settings(suite, args),
           "device": device,
           "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    (out / "scaling_run.json").write_text(json.dumps(run, indent=1, default=str))
    return run


def _stage(name: str) -> str:
    """A stage's kind: "checking seed 3/5" and "re-timing: noisy timing" are one kind each."""
    name = name.split(":")[0].strip()
    return "checking seeds" if name.startswith("checking seed") else name


def stage_seconds(db: Path) -> dict[str, float]:
    """Seconds spent in each evaluation stage, summed over a bench's problems, from its run store: from each stage's
    event to the run's next event. "synthesis" runs from the run's start to its first stage; "verdict" from the
    last stage to the verdict; what follows the verdict (profile, bookkeeping) until the run ends is "after".
    Side by side for 1 and k GPUs, it shows which stage grows when k problems run at once."""
    import sqlite3

    totals: dict[str, float] = {}
    if not db.is_file():
        return totals
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT run_id, ts, kind, data FROM events ORDER BY run_id, seq").fetchall()
    finally:
        con.close()
    runs: dict[str, list] = {}
    for run_id, ts, kind, data in rows:
        runs.setdefault(run_id, []).append((datetime.fromisoformat(ts).timestamp(), kind, data))
    for events in runs.values():
        current = "synthesis"
        for (t, kind, data), (t_next, _, _) in zip(events, events[1:]):
            if kind == "eval_stage":
                try:
                    current = _stage(str(json.loads(data or "{}").get("stage", "")))
                except ValueError:
                    current = "eval_stage"
            elif kind == "verdict":
                current = "after"
            totals[current] = totals.get(current, 0.0) + (t_next - t)
    return totals


def _settings(suite: str, args) -> dict:
    """What makes two benches comparable: a reused run must have been made with exactly these."""
    return {"suite": suite, "target": args.target, "level": args.level, "full": args.full, "best_of": args.best_of}


def _reused(folder: Path, suite: str, args, device: str) -> dict | None:
    """A finished bench of an earlier call, if it was made with these settings on this kind of device (a later
    call may land on another machine: an H100 bench is no baseline for H200s)."""
    try:
        run = json.loads((folder / "scaling_run.json").read_text())
    except (OSError, ValueError):
        return None
    return run if run.get("settings") == _settings(suite, args) and run.get("device") == device else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", help="GPU counts to run, e.g. 1,2,8 (default: 1, 2 and all)")
    ap.add_argument("--suites", default="gallery,kernelbench", help="gallery, kernelbench, or both (default)")
    ap.add_argument("--kernelbench", default=str(ROOT / "assets" / "problems"),
                    help="a directory in KernelBench's layout (default: assets/problems)")
    ap.add_argument("--level", type=int, help="only this level of each suite")
    ap.add_argument("--target", default="cuda", choices=("cuda", "triton", "cpu"),
                    help="cpu: a trial run without GPUs, k CPU slots standing in for k GPUs (timings share cores)")
    ap.add_argument("--slots", type=int, help="with --target cpu: how many slots 'all' means (default 2)")
    ap.add_argument("--full", action="store_true", help="the loop's default iterations and the timed baselines")
    ap.add_argument("--best-of", type=int, default=1, metavar="K",
                    help="candidates per step (default 1); each candidate's evaluation is then a Ray task of its "
                         "own, and a problem's run waits for its candidates' GPUs, so the overhead column is no "
                         "longer GPU time outside the runs")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "ray_multi_gpu"))
    ap.add_argument("--reuse", action="store_true",
                    help="read back a GPU count's finished bench from --out (same settings) instead of running it "
                         "again: a suite split over several device calls")
    args = ap.parse_args()
    _ensure_ray()
    from kforge_core.bench.agreement import same_verdicts
    from kforge_core.platform import get_platform

    available = (args.slots or 2) if args.target == "cpu" else _gpu_count()
    if available < 1 or not get_platform(args.target).availability().ok:
        sys.exit(f"no usable GPU for --target {args.target} here ({available} CUDA devices)")
    counts = sorted({int(g) for g in args.gpus.split(",")}) if args.gpus else sorted({1, min(2, available),
                                                                                      available})
    if counts[0] != 1 or counts[-1] > available:
        sys.exit(f"--gpus must start at 1 and stay within the {available} GPUs here")
    suites = {"gallery": ("gallery", "cpu" if args.target == "cpu" else "gpu"), "kernelbench": (args.kernelbench, None)}
    chosen = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in suites]
    if unknown:
        sys.exit(f"unknown suite(s) {unknown}: choose from gallery, kernelbench")
    out = Path(args.out)
    if not args.reuse:
        shutil.rmtree(out, ignore_errors=True)  # fresh benches: a resumed one would time nothing
    device = get_platform(args.target).device_name()
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {available} x {device}, "
          f"GPU counts {counts}, target {args.target}, {'full loop' if args.full else '1 functional iteration'}, "
          f"best of {args.best_of}",
          flush=True)
    table, mismatch = [], False
    for name in chosen:
        spec, size_class = suites[name]
        base = None
        for k in counts:
            folder = out / f"{name}-{k}gpu"
            run = _reused(folder, spec, args, device) if args.reuse else None
            if run:
                print(f"== {name}, {k} GPU(s): read back from {folder} (finished {run['finished']})", flush=True)
            else:
                print(f"== {name}, {k} GPU(s)", flush=True)
                shutil.rmtree(folder, ignore_errors=True)  # a partial bench would time nothing
                run = _bench(spec, folder, k, args, size_class, device)
            base = base or run
            same, diff = same_verdicts(base["records"], run["records"])
            mismatch |= not same
            n = len(run["records"])
            busy = sum(r.get("wall_s") or 0 for r in run["records"])
            table.append({"suite": name, "gpus": k, "problems": n, "correct": run["summary"]["correct"],
                          "wall_s": run["wall_s"], "per_min": 60 * n / run["wall_s"],
                          "speedup": base["wall_s"] / run["wall_s"],
                          "overhead_s": (k * run["wall_s"] - busy) / n,
                          "median_run_s": statistics.median(r.get("wall_s") or 0 for r in run["records"]),
                          # the bench's fixed start: until its first problem began on a worker (job, worker, code)
                          "first_start_s": min((r["queued_s"] for r in run["records"]
                                                if isinstance(r.get("queued_s"), (int, float))), default=None),
                          "same": same, "diff": diff})
    print("\nsuite        GPUs  problems  correct  wall s  problems/min  speedup  % of linear  overhead/task s  "
          "first start s  verdicts = 1 GPU")
    for r in table:
        first = f"{r['first_start_s']:.1f}" if r.get("first_start_s") is not None else "-"
        print(f"{r['suite']:<12} {r['gpus']:>4}  {r['problems']:>8}  {r['correct']:>7}  {r['wall_s']:>6.0f}  "
              f"{r['per_min']:>12.1f}  {r['speedup']:>6.2f}x  {100 * r['speedup'] / r['gpus']:>10.0f}%  "
              f"{r['overhead_s']:>15.2f}  {first:>13}  {'yes' if r['same'] else 'NO: ' + r['diff']}")
    stages = {(r["suite"], r["gpus"]): stage_seconds(out / f"{r['suite']}-{r['gpus']}gpu" / "runs.db") for r in table}
    names = sorted({n for st in stages.values() for n in st}, key=lambda n: -max(st.get(n, 0) for st in stages.values()))
    if names:
        print("\nseconds per stage, summed over the problems (which stage grows when problems run at once)")
        print(f"{'suite':<12} {'GPUs':>4}  " + "  ".join(f"{n[:22]:>22}" for n in names))
        for (suite, k), st in stages.items():
            print(f"{suite:<12} {k:>4}  " + "  ".join(f"{st.get(n, 0):>22.1f}" for n in names))
    for r in table:
        r["stage_s"] = stages.get((r["suite"], r["gpus"]), {})
    (out / "scaling.json").write_text(json.dumps(table, indent=1))
    print(f"\n(per-task overhead: GPU time outside the problems' own runs, per problem; first start: from the bench's "
          f"start until its first problem began on a worker, paid once per bench; {out / 'scaling.json'})")
    return 1 if mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
