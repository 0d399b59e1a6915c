"""Device memory of a judged CUDA evaluation, per process (issue 26: KernelBench's 6-8 GiB problems ran an 80 GB
card out of memory with the judge, the candidate's process and the torch.compile server holding ~70 GB at 6 GiB).

The judge's reference checks hold at most three problem-sized tensors (two runs of the reference on the same
inputs, the second on the inputs themselves). The candidate's process's own account (verdict
`memory.candidate_process`, reserved bytes of CUDA's caching allocator) must show: its set-up's reference call
given back before the judge's first request; no phase holding more than its copy of the inputs, the poisoned blocks
a checked call is given (2x the outputs) and a fixed working set; the timing phase only its inputs and the timed
call's output (correctness's cached blocks given back as it begins). A buffer kept for the process's life and taken
from a split of a freed problem-sized block (the cache-flush buffer, the fingerprint's weights) used to pin that
block, making every later tensor of that size a new reservation.
The problem and the honest one-kernel GELU are bench/eval_footprint.py's. Skipped without an NVIDIA GPU; `bash scripts/gpu_check.sh tests`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs an NVIDIA GPU: torch.cuda.is_available() is False; run scripts/gpu_check.sh tests on a GPU machine")]

MiB = 1 << 20
SLACK = 512 * MiB  # the flush buffer (2x L2), the fingerprint's weights, the comparison's chunks, the context's own

ROOT = Path(__file__).resolve().parents[2]


def _footprint_bench():
    """bench/eval_footprint.py: its GELU problem (KernelBench's 26_GELU_ at any size) and honest NVRTC candidate."""
    spec = importlib.util.spec_from_file_location("eval_footprint", ROOT / "bench" / "eval_footprint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_process_holds_its_tensors_and_no_more():
    from kforge_core.eval.evaluator import EvalOptions, evaluate
    from kforge_core.problem import load_problem

    bench = _footprint_bench()
    rows, cols = 2048, 131072  # 1 GiB in, 1 GiB out
    v = evaluate(load_problem(text=bench.PROBLEM.format(batch=rows, dim=cols), name="gelu_1gib"), bench.CUDA_CANDIDATE,
                 "cuda",
                 EvalOptions(timeout_s=300, baselines=False,
                             timing_options={"min_trials": 5, "max_trials": 8, "budget_s": 1.0}))
    assert v.status == "correct", v.reason
    tensor = rows * cols * 4
    cand = (v.memory or {}).get("candidate_process") or {}
    held, peaks = cand.get("held_reserved_bytes") or {}, cand.get("peak_reserved_bytes") or {}
    assert "setup" in held and {"correctness", "timing"} <= set(peaks), cand
    # the set-up's reference call (1 GiB in, 1 GiB out) is given back
    assert held["setup"] < SLACK, cand
    # its inputs, the two poisoned blocks of a checked call (one becomes the output), nothing of that size more
    assert peaks["correctness"] <= tensor + 2 * tensor + SLACK, cand
    # correctness's blocks given back when timing begins: its inputs and the timed call's output
    assert peaks["timing"] <= 2 * tensor + SLACK, cand
    # the judge's reference checks: two calls on the same inputs, at most three problem-sized tensors at once
    judge = v.memory["peak_bytes"]
    assert judge["reference checks"] <= 3 * tensor + SLACK, v.memory
