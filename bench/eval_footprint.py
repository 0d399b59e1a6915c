"""The evaluator's memory footprint: its peak memory against the problem's own live tensors (issue 26).

    python bench/eval_footprint.py --target cpu [--batch 1024 --dim 8192] [--no-timing] [--baselines]
    bash scripts/gpu_check.sh footprint         # CUDA at KernelBench's own 26_GELU_ sizes (4096 x 393216: 6 GiB)

The problem is a GELU in KernelBench's format (level1/26_GELU_: one input, one output of the same size, no
parameters), written here at the sizes asked for; the candidate is an honest one-kernel GELU (C++ on the CPU, NVRTC on
CUDA). Each row is one full `evaluate` (5 seeds, the in-place rewrite, and timing unless --no-timing); the verdict's
`memory` report gives the problem's sizes and each phase's peak:

- CUDA: torch.cuda.max_memory_allocated in the evaluation child, per phase (device memory; the CUDA context and
  the caching allocator's spare blocks are not counted);
- CPU: the evaluation child's peak resident set (VmHWM) per phase, less its resident set when the evaluation
  started (torch and the harness loaded, before the problem was imported).

What does not grow with the problem (torch's lazy initialisation, the candidate's library, the cache-flush buffer,
the comparison's fixed working set) is measured by the same evaluation at 8 x 8 first and subtracted:
ratio = (peak - the 8 x 8 evaluation's peak in that phase) / live, live = inputs + parameters + outputs (once each).
The goal is <= 3.

A judged evaluation's candidate's process (`harness.worker`) reports its own peaks per phase the same way (its
set-up, the candidate's load, correctness, timing, profiling; CUDA: allocated and reserved, held at each phase's end);
they are printed in a second table, against the same 8 x 8 evaluation's. They are that process's own account
(candidate code runs there; here the candidate is the honest one above). On the CPU they include the shared arena's
pages (inputs + outputs, mapped in both processes), so the table also gives (peak - 8x8 - arena) / live: the
candidate's process's private copies.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform as host
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kforge_core.eval.evaluator import EvalOptions, evaluate  # noqa: E402
from kforge_core.platform import get_platform  # noqa: E402
from kforge_core.problem import load_problem  # noqa: E402

# KernelBench level1/26_GELU_'s structure, with the sizes as parameters
PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a GELU activation."""
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)


batch_size = {batch}
dim = {dim}


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
'''

CPU_CANDIDATE = r'''import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = """
#include <cmath>
#include <cstdint>

extern "C" void gelu(const float* x, float* out, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = compile_cpp(SOURCE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.gelu(x, out, x.numel())
        return out
'''

CUDA_CANDIDATE = r'''import torch
import torch.nn as nn

from platforms.cuda import compile_cuda

SOURCE = """
extern "C" __global__ void gelu(const float* __restrict__ x, float* __restrict__ out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.mod = compile_cuda(SOURCE)
        self.sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        self.mod.gelu(grid=(self.sms * 8,), block=(256,), args=(x, out, n))
        return out
'''

MiB = float(1 << 20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--batch", type=int, help="rows (default: 1024 on the CPU, 4096 on CUDA: KernelBench's)")
    ap.add_argument("--dim", type=int, help="columns (default: 8192 on the CPU, 393216 on CUDA: KernelBench's)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-timing", action="store_true", help="correctness only")
    ap.add_argument("--baselines", action="store_true", help="time torch.compile too (a separate warm process)")
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args()
    cuda = args.target == "cuda"
    batch = args.batch or (4096 if cuda else 1024)
    dim = args.dim or (393216 if cuda else 8192)
    platform = get_platform(args.target, require_available=True)
    problem = load_problem(text=PROBLEM.format(batch=batch, dim=dim), name="gelu_kernelbench_sized")
    candidate = CUDA_CANDIDATE if cuda else CPU_CANDIDATE
    options = EvalOptions(timing=not args.no_timing, baselines=args.baselines, timeout_s=args.timeout,
                          memory_limit_mb=None if cuda else 16384,
                          timing_options={"min_trials": 5, "max_trials": 10, "budget_s": 2.0})
    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.device_name()}; {host.node()}, "
          f"{os.cpu_count()} cores; GELU {batch} x {dim} fp32 ({batch * dim * 4 / MiB:.0f} MiB per tensor); "
          f"timing {'on' if options.timing else 'off'}, torch.compile baseline {'on' if args.baselines else 'off'}",
          flush=True)
    tiny = evaluate(load_problem(text=PROBLEM.format(batch=8, dim=8), name="gelu_8x8"), candidate, args.target,
                    options)
    fixed = (tiny.memory or {}).get("peak_bytes") or {}
    tiny_cand = (tiny.memory or {}).get("candidate_process") or {}
    print(f"8 x 8 evaluation ({tiny.status}): peak MiB per phase "
          + ", ".join(f"{k} {v / MiB:.0f}" for k, v in fixed.items())
          + ("; candidate's process (reported): " + ", ".join(
              f"{k} {v / MiB:.0f}" for k, v in (tiny_cand.get("peak_bytes") or {}).items()) if tiny_cand else ""))
    rows = []
    print("| # | status | inputs MiB | params MiB | outputs MiB | live MiB | phase | peak MiB | peak - 8x8 MiB | "
          "(peak - 8x8) / live | reserved peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for run in range(1, args.runs + 1):
        v = evaluate(problem, candidate, args.target, options)
        rows.append((run, v))
        mem = v.memory or {}
        sizes = mem.get("sizes") or {}
        live = mem.get("live_bytes") or 0
        if not live:
            print(f"| {run} | {v.status} | - | - | - | - | - | - | - | - | - |  {v.reason[:300]}")
            continue
        for phase, peak in (mem.get("peak_bytes") or {}).items():
            grown = peak - fixed.get(phase, 0)
            ratio = grown / live
            worst = max(worst, ratio)
            print(f"| {run} | {v.status} | {sizes['inputs'] / MiB:.0f} | {sizes['params'] / MiB:.0f} | "
                  f"{sizes['outputs'] / MiB:.0f} | {live / MiB:.0f} | {phase} | {peak / MiB:.0f} | {grown / MiB:.0f} | "
                  f"{ratio:.2f} | {_mib((mem.get('peak_reserved_bytes') or {}).get(phase))} |")
        if v.status != "correct":
            print(f"  ({v.status}: {v.reason[:300]})")
    print(f"measure: {(v.memory or {}).get('measure', '-')}; worst peak / live {worst:.2f} (goal <= 3)")
    _candidate_table(rows, tiny_cand)
    return 0


def _mib(n) -> str:
    return "-" if n is None else f"{n / MiB:.0f}"


def _candidate_table(rows, tiny: dict) -> None:
    """The candidate's process's own per-phase account (verdict memory.candidate_process)."""
    fixed = tiny.get("peak_bytes") or {}
    fixed_reserved = tiny.get("peak_reserved_bytes") or {}
    print()
    print("candidate's process (reported by it: its own account), per phase:")
    print("| # | phase | peak MiB | peak - 8x8 MiB | (peak - 8x8) / live | (peak - 8x8 - arena) / live | "
          "held at end MiB | reserved peak MiB | reserved held MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run, v in rows:
        mem = v.memory or {}
        cand, live = mem.get("candidate_process") or {}, mem.get("live_bytes") or 0
        if not cand or not live or "peak_bytes" not in cand:
            print(f"| {run} | - | {cand.get('unavailable', 'no account')} |  |  |  |  |  |  |")
            continue
        arena = cand.get("arena_bytes", 0) if cand.get("arena") == "host" else 0  # host pages count in its RSS
        reserved, held, held_reserved = (cand.get(k) or {} for k in ("peak_reserved_bytes", "held_bytes",
                                                                      "held_reserved_bytes"))
        for phase, peak in cand["peak_bytes"].items():
            grown = peak - fixed.get(phase, 0)
            res = reserved.get(phase)
            mapped = 0 if phase in ("setup", "load") else arena  # the arena comes with the first checked call
            print(f"| {run} | {phase} | {peak / MiB:.0f} | {grown / MiB:.0f} | {grown / live:.2f} | "
                  f"{(grown - mapped) / live:.2f} | {held.get(phase, 0) / MiB:.0f} | "
                  f"{'-' if res is None else f'{res / MiB:.0f} ({(res - fixed_reserved.get(phase, 0)) / live:.2f} live)'} | "
                  f"{'-' if phase not in held_reserved else f'{held_reserved[phase] / MiB:.0f}'} |")
    last = (rows[-1][1].memory or {}).get("candidate_process") or {} if rows else {}
    print(f"arena: {last.get('arena', '-')} {last.get('arena_bytes', 0) / MiB:.0f} MiB; measure: "
          f"{last.get('measure', '-')}")


if __name__ == "__main__":
    sys.exit(main())
