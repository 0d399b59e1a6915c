"""Where a small CPU kernel's speedup goes: the candidate and eager timed in ONE process, under the evaluation's own
timing environment (child_setup.timing_environment: OpenMP policy and threads, allocator thresholds), from each of
the states an evaluation's timed call can start from. No judge, no other process: what differs between the rows is
the state alone.

    python bench/timing_states.py --problem P.py --candidate C.py [--trials 80] [--states b2b,flush,idle,...]
    python bench/timing_states.py --problem P.py --builtin parallelize_rows,vectorize,block_shape

`--builtin MOVES` times the built-in synthesizer's program for the problem with those schedule moves (a run's
best on KernelBench's Sigmoid at 256 x 384 was parallelize_rows, vectorize, block_shape). States (before each timed
call; candidate and eager alternate, each call on fresh inputs):

- `b2b`: nothing: calls back to back, as a user's loop makes them;
- `flush`: the evaluation's cache flush (`Platform.flush_cache`: twice the last-level cache written);
- `idle`: 30 ms asleep, as each process of an evaluation idles between its trials (inputs, the other sides' calls);
- `idle+flush`: both, as a timed call in an evaluation;
- `evict`: the call's inputs alone evicted from every cache level (clflush; x86 only, a helper compiled here);
- `flush+lead`: the flush, then an untimed call on other inputs right before the timed one.

Each row: the candidate's median, split into the time inside its compiled kernels (what they report through the
platform's launch records) and the rest of its call (its Python wrapper, ctypes); eager's median; eager / candidate.
On the 2-core VM box (2026-11-26 11:04 UTC, load 0.5, 80 trials) Sigmoid 256 x 384 with the built-in's best read
0.80x back to back, 0.58x after the flush, 0.61x after 30 ms idle and 0.82x after the flush and a lead-in call: the
candidate's call outside its kernel took 12 us back to back, 82 us after the flush, 171 us after the idle gap;
eager's one ATen call 52, 95 and 150 us. A second run (40 trials) read 0.66x back to back: the rows move from run
to run on a shared box, compare them within one run. An evaluation's speedups (0.59-0.68x) are the cold rows'.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STATES = ("b2b", "flush", "idle", "idle+flush", "evict", "flush+lead")
IDLE_S = 0.03

_EVICT = r"""
#include <cstdint>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
extern "C" void kf_evict(const void* p, int64_t nbytes) {
#if defined(__x86_64__) || defined(__i386__)
    const char* c = reinterpret_cast<const char*>(p);
    for (int64_t i = 0; i < nbytes; i += 64) _mm_clflush(c + i);
    _mm_mfence();
#else
    (void)p; (void)nbytes;
#endif
}
"""


def _child(problem_path: str, candidate_path: str, states: list[str], trials: int) -> None:
    import platform as host

    import torch

    from bare_pair import load_pair
    from kforge_core.eval.harness import launches
    from kforge_core.platform import get_platform

    platform = get_platform("cpu")
    prob, ref, new = load_pair(problem_path, candidate_path, "states")
    evict = None
    if host.machine() in ("x86_64", "AMD64", "i686"):
        from platforms.cpu import compile_cpp

        lib = compile_cpp(_EVICT, openmp=False)
        evict = lib.kf_evict

    def before(state: str, model, inputs) -> None:
        for part in state.split("+"):
            if part == "flush":
                platform.flush_cache()
            elif part == "idle":
                time.sleep(IDLE_S)
            elif part == "evict":
                for t in inputs:
                    if isinstance(t, torch.Tensor) and t.is_contiguous():  # any dtype (void*): its bytes
                        evict(t, t.numel() * t.element_size())
            elif part == "lead":
                model(*prob.get_inputs())

    with torch.no_grad():
        for _ in range(5):  # warm-up (builds, first-call paths)
            x = prob.get_inputs()
            new(*x), ref(*x)
        for state in states:
            if "evict" in state and evict is None:
                print(json.dumps({"state": state, "skipped": "no clflush on this machine"}), flush=True)
                continue
            total, kernel, eager = [], [], []
            for trial in range(trials):
                for name, model in ([("candidate", new), ("eager", ref)][:: 1 if trial % 2 else -1]):
                    inputs = prob.get_inputs()
                    before(state, model, inputs)
                    k0, t0 = launches.kernel_ns(), time.perf_counter_ns()
                    model(*inputs)
                    ns = time.perf_counter_ns() - t0
                    if name == "candidate":
                        total.append(ns / 1e3)
                        kernel.append((launches.kernel_ns() - k0) / 1e3)
                    else:
                        eager.append(ns / 1e3)
            print(json.dumps({"state": state, "candidate_us": statistics.median(total),
                              "kernel_us": statistics.median(kernel), "eager_us": statistics.median(eager)}),
                  flush=True)


def _builtin(problem_path: str, moves: str) -> str:
    """The built-in synthesizer's program for the problem with `moves`, written next to nothing (a temp file)."""
    import tempfile

    from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
    from kforge_core.synth.schedule import Schedule

    sched = Schedule()
    for move in [m for m in moves.split(",") if m]:
        sched = sched.with_move(move)
    res = BuiltinGenerationAgent().synthesize(Path(problem_path).read_text(), "cpu", sched,
                                              problem_name=Path(problem_path).stem)
    if res.program is None:
        raise SystemExit(f"the built-in synthesizer wrote no program: {res.error}")
    f = tempfile.NamedTemporaryFile("w", suffix=".py", prefix="kforge-states-", delete=False)
    f.write(res.program)
    f.close()
    return f.name


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3], sys.argv[4].split(","), int(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", required=True)
    ap.add_argument("--candidate", help="candidate file (ModelNew)")
    ap.add_argument("--builtin", metavar="MOVES", help="time the built-in synthesizer's program with these moves "
                                                       "(comma-separated; '' for its plain first version)")
    ap.add_argument("--trials", type=int, default=80)
    ap.add_argument("--states", default=",".join(STATES))
    args = ap.parse_args()
    if (args.candidate is None) == (args.builtin is None):
        ap.error("give --candidate or --builtin")
    candidate = args.candidate or _builtin(args.problem, args.builtin)
    from kforge_core.eval.child_setup import timing_environment

    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; load average {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cores; {Path(args.problem).name}; {args.trials} trials per side and state", flush=True)
    print("| state | candidate us (kernel + rest) | eager us | eager / candidate |")
    print("|---|---|---|---|")
    proc = subprocess.Popen([sys.executable, __file__, "--child", args.problem, candidate, args.states,
                             str(args.trials)], env={**os.environ, **timing_environment()}, stdout=subprocess.PIPE,
                            text=True)
    for line in proc.stdout:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if "skipped" in row:
            print(f"| {row['state']} | {row['skipped']} | | |", flush=True)
            continue
        c, k, e = row["candidate_us"], row["kernel_us"], row["eager_us"]
        print(f"| {row['state']} | {c:.1f} ({k:.1f} + {c - k:.1f}) | {e:.1f} | {e / c:.3f}x |", flush=True)
    if args.builtin is not None:
        os.unlink(candidate)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return proc.wait()


if __name__ == "__main__":
    raise SystemExit(main())
