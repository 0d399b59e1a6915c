"""Local executor vs Ray over the same small suite, side by side in one run: what Ray adds per problem.

    python bench/ray_overhead.py [--suite level1/01_relu,level1/03_silu,level1/08_clamp] [--rounds 2]
    python bench/ray_overhead.py --target cuda --suite gallery        # on one GPU
    python bench/ray_overhead.py --best-of 2     # best-of-k: each candidate's evaluation a Ray task of its own
    python bench/ray_overhead.py --target cuda --suite LIST --warm-up local --rounds 1   # ~10 problems in one call

Starts a Ray cluster on this machine (a head and one worker node with one CPU, and with --target cuda one GPU, so
Ray runs the problems one at a time as the local executor does on one device), then alternates: the bench with the local executor, the same
bench through Ray, `--rounds` times, each a fresh `python -m kforge_core bench` process (as a user runs it: both
pay their imports and start their evaluators afresh) into a fresh output folder and run store (the build cache is
shared, so after the first round both find their kernels built). Prints per round the wall time of the whole bench and per
problem, and at the end the medians over the rounds after the first:

- per-task overhead: (Ray bench - local bench) / problems, everything included (joining the cluster, shipping
  the code, starting worker processes, events through the mailbox, results back);
- in-task: median over problems of (Ray run - local run), the run timed from its task's start;
- joining: ray.init alone (with the code shipped), once per bench;
- Ray's machinery alone, printed first: empty tasks that only send a problem's worth of events (60) through the
  mailbox, one at a time on a warm worker -- the part of the overhead a loaded machine's noise does not hide.

Both executors run with OMP_NUM_THREADS=1 (Ray's own choice for a one-core task), so thread counts do not differ.
Verdicts (status, correct, iterations) must be the same for both executors; a difference is printed and makes
the exit status 1. The built-in agent, one functional iteration, no baselines (a problem's own timing is not the
point); the gallery at CPU sizes on the CPU target, at its own (GPU) sizes elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Ray sets OMP_NUM_THREADS to the cores a task asked for (1 here); the local bench gets the same, or the comparison
# would measure thread counts rather than Ray. Set before anything imports torch or starts a child.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from kforge_core import tempdirs  # noqa: E402
from kforge_core.bench.agreement import same_verdicts  # noqa: E402
from kforge_core.bench.ray_driver import connect, import_ray  # noqa: E402
from kforge_core.bench.ray_local import local_cluster  # noqa: E402

SUITE = "level1/01_relu,level1/03_silu,level1/08_clamp"


def _bench(suite: str, target: str, out: Path, cluster: str | None, best_of_k: int) -> tuple[float, list[dict]]:
    """One bench as a user runs it: a fresh `python -m kforge_core bench` process, timed from its start to its
    exit. In-process, the local bench would find the imports, the fork servers and the pre-started children of
    the bench before it, while Ray's workers start afresh each time: the difference would be that, not Ray."""
    cmd = [sys.executable, "-m", "kforge_core", "bench", "--suite", suite, "--target", target, "--agent", "builtin",
           "--out", str(out), "--db", str(out / "runs.db"), "--max-functional-iters", "1",
           "--max-optimization-iters", "0", "--no-baselines", "--best-of", str(best_of_k)]
    if target == "cpu":
        cmd += ["--size-class", "cpu"]
    # one device either way: the cluster here offers one, as the local executor is told to use
    cmd += ["--cluster", cluster] if cluster else ["--devices", "1"]
    start = time.perf_counter()
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        sys.exit(f"the bench failed (exit {run.returncode}): {' '.join(cmd)}\n{run.stderr[-3000:]}")
    return wall, json.loads((out / "results.json").read_text())["problems"]


def _empty_tasks(ray, n: int, events: int) -> list[float]:
    """Seconds per task for `n` tasks that do no work but the machinery's: start on a warm worker, send `events`
    events through the mailbox (as a problem's loop does), return; the driver drains. One at a time."""
    from kforge_core.bench.ray_task import Mailbox, Outbox

    def empty(mailbox, events: int) -> int:
        outbox = Outbox(mailbox, "k", "a")
        for i in range(events):
            outbox.add({"kf": "event", "i": i})
        outbox.close()
        return events

    mailbox = Mailbox.remote()
    task = ray.remote(empty).options(num_cpus=1)
    ray.get(task.remote(mailbox, 1))  # a warm worker, as a bench's later problems find
    times = []
    for _ in range(n):
        start = time.perf_counter()
        ray.get(task.remote(mailbox, events))
        assert len(ray.get(mailbox.drain.remote())) >= events
        times.append(time.perf_counter() - start)
    ray.kill(mailbox)
    return times


def _walls(records: list[dict], key: str) -> str:
    return " ".join(f"{r.get(key) or 0:.1f}" for r in records)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default=SUITE)
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of (local, Ray); the first warms the caches; 0: only the empty-task measurement")
    ap.add_argument("--target", default="cpu", help="cpu (one CPU slot), or cuda / triton (one GPU: GPU 0)")
    ap.add_argument("--warm-up", choices=("both", "local"), default="both",
                    help="both (default): the first round of (local, Ray) warms the caches and is not counted; "
                         "local: one local bench warms them, and every round counts -- a longer suite within a "
                         "10-minute device call (--rounds 1: local, then Ray, each once, warm)")
    ap.add_argument("--best-of", type=int, default=1, metavar="K",
                    help="candidates per step (default 1); through Ray each candidate's evaluation is a task (on "
                         "the one device here they queue one after the other, as locally)")
    args = ap.parse_args()
    ray = import_ray()
    work = tempdirs.make("ray-overhead-")
    rows, failed = [], False
    node = {"num_cpus": 1} if args.target == "cpu" else {"num_cpus": 1, "num_gpus": 1}
    with local_cluster([node]) as cluster:
        start = time.perf_counter()
        connect(cluster.address)
        join_s = time.perf_counter() - start
        empty = _empty_tasks(ray, 20, 60)
        ray.shutdown()
        print(f"Ray's machinery alone (20 empty tasks, 60 events each through the mailbox, warm worker): median "
              f"{1000 * statistics.median(empty):.0f} ms per task (min {1000 * min(empty):.0f}, max "
              f"{1000 * max(empty):.0f})", flush=True)
        if args.rounds == 0:
            return 0
        if args.warm_up == "local":
            warm_s, warm = _bench(args.suite, args.target, work / "warm-up", None, args.best_of)
            print(f"warm-up (local, not counted): {warm_s:6.1f} s over {len(warm)} problems", flush=True)
        for r in range(args.rounds):
            local_s, local = _bench(args.suite, args.target, work / f"local-{r}", None, args.best_of)
            ray_s, remote = _bench(args.suite, args.target, work / f"ray-{r}", cluster.address, args.best_of)
            ok, diff = same_verdicts(local, remote)
            failed |= not ok
            in_task = [b["wall_s"] - a["wall_s"] for a, b in zip(local, remote)]
            rows.append((local_s, ray_s, statistics.median(in_task), len(local)))
            print(f"round {r + 1}: local {local_s:6.1f} s, Ray {ray_s:6.1f} s over {len(local)} problems; per problem "
                  f"local {_walls(local, 'wall_s')} s, Ray {_walls(remote, 'wall_s')} s (queued "
                  f"{_walls(remote, 'queued_s')} s); verdicts {'identical' if ok else 'DIFFER: ' + diff}", flush=True)
            for a, b in zip(local, remote):  # what each side said where they differ: the reason, not only the label
                if not ok and (a.get("status"), a.get("correct")) != (b.get("status"), b.get("correct")):
                    for side, rec in (("local", a), ("Ray", b)):
                        print(f"   {rec['problem']} ({side}): {rec.get('status')}, last verdict "
                              f"{rec.get('last_status')}: {(rec.get('reason') or '')[:600]}", flush=True)
            if os.environ.get("OUT"):  # both benches' records, to read after the call
                for name in (f"local-{r}", f"ray-{r}"):
                    src = work / name / "results.json"
                    if src.exists():
                        Path(os.environ["OUT"], f"ray_overhead_{name}.json").write_text(src.read_text())
    measured = rows if args.warm_up == "local" else rows[1:] or rows
    n = measured[0][3]
    after = " after the first" if args.warm_up == "both" and len(rows) > 1 else ""
    print(f"\nmedians over {len(measured)} round(s){after}:")
    print(f"{'':24}{'local':>10}{'Ray':>10}")
    print(f"{'bench wall (s)':24}{statistics.median(r[0] for r in measured):10.1f}"
          f"{statistics.median(r[1] for r in measured):10.1f}")
    print(f"{'per problem (s)':24}{statistics.median(r[0] for r in measured) / n:10.2f}"
          f"{statistics.median(r[1] for r in measured) / n:10.2f}")
    print(f"per-task overhead of Ray, all included: "
          f"{statistics.median((r[1] - r[0]) / r[3] for r in measured):+.2f} s; in the task itself: "
          f"{statistics.median(r[2] for r in measured):+.2f} s; joining the cluster (once per bench): {join_s:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
