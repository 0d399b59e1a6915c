"""Runs written through the real store API, for the app's tests and the UI latency benchmark: what a worker would
have written, without running the loop (so replay rendering is tested on its own)."""

from __future__ import annotations

import os
from pathlib import Path

from kforge_core.store import RunStore

PROBLEM = '''"""Swish with a bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return x * torch.sigmoid(x) + self.bias


def get_inputs():
    return [torch.randn(512, 4096)]


def get_init_inputs():
    return [4096]
'''

PROGRAM_V0 = '''import torch
import torch.nn as nn
from platforms.cpu import compile_cpp

SOURCE = r"""
#include <cmath>
#include <cstdint>
extern "C" void swish_bias(const float* x, const float* b, float* out, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = x[r * cols + c]
            out[r * cols + c] = v / (1.0f + std::exp(-v)) + b[c];
        }
}
"""


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.lib = compile_cpp(SOURCE)

    def forward(self, x):
        out = torch.empty_like(x)
        self.lib.swish_bias(x, self.bias.detach(), out, x.shape[0], x.shape[1])
        return out
'''
PROGRAM_V1 = PROGRAM_V0.replace("float v = x[r * cols + c]\n", "float v = x[r * cols + c];\n")
PROGRAM_V2 = PROGRAM_V1.replace("    for (int64_t r = 0;", "    #pragma omp parallel for\n    for (int64_t r = 0;")

MARKER_PROGRAM = "seeded-program-marker"


def _diff(a: str, b: str, against: int) -> str:
    import difflib

    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), f"iteration_{against}.py",
                                        "candidate.py"))


def _verdict(status: str, reason: str, candidate_ms: float | None = None, eager_ms: float | None = None,
             compiled_ms: float | None = None, **extra) -> dict:
    timing = (lambda ms: None if ms is None else {"median_ms": ms, "min_ms": ms * 0.97, "max_ms": ms * 1.1,
                                                   "trials": 20})
    d = {"status": status, "reason": reason, "target": "cpu", "tolerance": {"name": "default"},
         "candidate": timing(candidate_ms), "eager": timing(eager_ms), "compiled": timing(compiled_ms),
         "checks": [{"name": "5 seeds", "passed": status == "correct", "detail": reason}], "warnings": [],
         "compile_log": "", "device": "AMD EPYC (2 cores)", "log_tail": "", "wall_s": 3.2,
         "candidate_ms": candidate_ms, "eager_ms": eager_ms, "compiled_ms": compiled_ms,
         "speedup_vs_eager": (eager_ms / candidate_ms) if candidate_ms and eager_ms else None,
         "speedup_vs_compiled": (compiled_ms / candidate_ms) if candidate_ms and compiled_ms else None}
    d.update(extra)
    return d


def add_correct_iteration(store: RunStore, run_id: str, index: int, pass_: str, code: str, previous: str,
                          ms: float, eager: float = 4.0, compiled: float = 2.5, flops: int | None = 8_388_608,
                          launches: tuple[dict, int] | None = None) -> None:
    """Iteration `index` as a worker writes a correct one: program, diff, verdict, timings, profile, the end.
    `launches`: the verdict's kernel launch totals and the number of checked calls they were counted over."""
    store.start_iteration(run_id, index, pass_)
    store.append_event(run_id, "program_extracted", {"iteration": index, "code": code, "language": "python",
                                                     "notes": ""}, index)
    store.append_event(run_id, "diff", {"iteration": index, "against_iteration": index - 1,
                                        "unified_diff": _diff(previous, code, index - 1)}, index)
    verdict = _verdict("correct", "matches the reference on 5 seeds", ms, eager, compiled)
    if launches is not None:
        verdict.update(kernel_launches=launches[0], kernel_launch_calls=launches[1])
    store.append_event(run_id, "verdict", {"iteration": index, "verdict": verdict}, index)
    store.append_event(run_id, "timings", {"iteration": index, "candidate_ms": ms, "eager_ms": eager,
                                           "compiled_ms": compiled, "speedup_vs_eager": eager / ms,
                                           "speedup_vs_compiled": compiled / ms, "torch_compile_s": 11.5}, index)
    profile = {"tool": "torch.profiler", "device": "cpu", "per_forward_ms": ms,
               "kernels": [{"name": "kforge::swish_bias", "calls_per_forward": 1, "ms_per_forward": ms * 0.9,
                            "share": 0.9, "custom": True},
                           {"name": "aten::empty_like", "calls_per_forward": 1, "ms_per_forward": ms * 0.1,
                            "share": 0.1, "custom": False}],
               "custom_share": 0.9, "launches_per_forward": 1, "notes": []}
    roofline = {"bytes": 16_793_600, "flops": flops, "bandwidth_gbs": 20.0, "fp32_tflops": 0.2,
                "memory_floor_ms": 0.84, "compute_floor_ms": 0.04, "floor_ms": 0.84, "bound": "memory",
                "pct_of_roofline": 100 * 0.84 / ms}
    store.append_event(run_id, "profile", {"iteration": index, "profile": profile, "roofline": roofline}, index)
    store.finish_iteration(run_id, index, "correct", reason="matches the reference on 5 seeds", code=code,
                           candidate_ms=ms, speedup_vs_eager=eager / ms, speedup_vs_compiled=compiled / ms,
                           verdict=verdict, profile=profile)


def seed_finished_run(store: RunStore, problem_name: str = "swish_bias", target: str = "cpu") -> str:
    """A succeeded run: functional pass (a build failure, then a correct program), optimization pass (one faster
    program guided by recommendations), usage, bests and the end."""
    config = {"problem_name": problem_name, "target": target, "agent": "builtin", "max_functional_iters": 3,
              "max_optimization_iters": 2, "patience": 3, "best_of_k": 1, "tolerance": "default"}
    run_id = store.create_run(problem_name, PROBLEM, target, agent="builtin", config=config)
    store.start_run(run_id, pid=os.getpid())
    store.append_event(run_id, "pass_started", {"pass": "functional", "max_iterations": 3})
    # iteration 0: a build failure
    store.start_iteration(run_id, 0, "functional")
    store.append_event(run_id, "prompt_sent", {"iteration": 0, "agent": "generation", "model": "builtin",
                                               "messages": [{"role": "system", "content": "You write kernels."},
                                                            {"role": "user", "content": PROBLEM}]}, 0)
    for chunk in ("Here is a fused kernel:\n```python\n", PROGRAM_V0[:200], PROGRAM_V0[200:], "```\n"):
        store.append_event(run_id, "tokens", {"text": chunk, "agent": "generation"}, 0)
    store.append_event(run_id, "program_extracted", {"iteration": 0, "code": PROGRAM_V0, "language": "python",
                                                     "notes": MARKER_PROGRAM}, 0)
    log = "candidate.py:12:37: error: expected ';' before 'out'\n   12 |             float v = x[r * cols + c]"
    store.append_event(run_id, "compile_log", {"iteration": 0, "log": log}, 0)
    verdict0 = _verdict("compile_error", "the kernel did not build: expected ';' (line 12)", compile_log=log)
    store.append_event(run_id, "verdict", {"iteration": 0, "verdict": verdict0}, 0)
    store.finish_iteration(run_id, 0, "compile_error", reason=verdict0["reason"], code=PROGRAM_V0, verdict=verdict0)
    store.add_usage(run_id, 900, 350, iteration=0, extra={"agent": "generation"})
    # iteration 1: correct, 1.6x
    add_correct_iteration(store, run_id, 1, "functional", PROGRAM_V1, PROGRAM_V0, ms=2.5)
    store.set_best(run_id, 1, speedup_vs_eager=4.0 / 2.5, speedup_vs_compiled=1.0, candidate_ms=2.5)
    store.append_event(run_id, "pass_started", {"pass": "optimization", "max_iterations": 2})
    # iteration 2: optimization guided by recommendations, 3.2x
    store.append_event(run_id, "recommendations", {
        "iteration": 2, "analyzed_iteration": 1, "agent_label": "built-in, rule-based (no LLM)", "text": "",
        "recommendations": [{"title": "Parallelize the row loop", "change": "add `#pragma omp parallel for`",
                             "why": "kforge::swish_bias is 90% of the time on one of 2 cores",
                             "expected_gain": "~2x", "move": "parallelize"}]}, 2)
    add_correct_iteration(store, run_id, 2, "optimization", PROGRAM_V2, PROGRAM_V1, ms=1.25)
    store.set_best(run_id, 2, speedup_vs_eager=4.0 / 1.25, speedup_vs_compiled=2.0, candidate_ms=1.25)
    store.add_usage(run_id, 1200, 400, iteration=2, extra={"agent": "generation"})
    store.finish_run(run_id, "succeeded")
    return run_id


def seed_live_run(store: RunStore, problem_name: str = "live_problem", pid: int | None = None) -> str:
    """A running run, claimed by `pid` (default: this process, so the dead-worker check leaves it alone), in the
    middle of its first iteration with streamed model output."""
    run_id = store.create_run(problem_name, PROBLEM, "cpu", agent="builtin",
                              config={"agent": "builtin", "max_functional_iters": 2, "max_optimization_iters": 2})
    store.start_run(run_id, pid=pid or os.getpid())
    store.append_event(run_id, "pass_started", {"pass": "functional", "max_iterations": 2})
    store.start_iteration(run_id, 0, "functional")
    store.append_event(run_id, "tokens", {"text": "Thinking about the kernel...\n", "agent": "generation"}, 0)
    return run_id


def db_file(tmp: Path) -> Path:
    return tmp / "runs.db"


def _builtin_run(store: RunStore, problem_name: str, functional: int, optimization: int) -> str:
    """A running built-in run on the CPU target, its functional pass started (budgets as given)."""
    config = {"problem_name": problem_name, "target": "cpu", "agent": "builtin", "problem_source": PROBLEM,
              "max_functional_iters": functional, "max_optimization_iters": optimization, "patience": 3,
              "best_of_k": 1, "tolerance": "default"}
    run_id = store.create_run(problem_name, PROBLEM, "cpu", agent="builtin", config=config)
    store.start_run(run_id, pid=os.getpid())
    store.append_event(run_id, "pass_started", {"pass": "functional", "max_iterations": functional})
    return run_id


def seed_mixed_run(store: RunStore, problem_name: str = "sigmoid_mixed") -> str:
    """A finished run as the issue saw one: a correct but slower program, a faster one, a slowdown (0.24x), an
    iteration with no program, and baselines that change from one measurement to the next (the newest eager value
    differs from the older ones). The best (iteration 2) is not the last iteration."""
    run_id = _builtin_run(store, problem_name, functional=5, optimization=4)
    add_correct_iteration(store, run_id, 0, "functional", PROGRAM_V1, PROGRAM_V0, ms=8.0, eager=4.0, compiled=2.5)
    store.set_best(run_id, 0, speedup_vs_eager=0.5, speedup_vs_compiled=2.5 / 8.0, candidate_ms=8.0)
    store.append_event(run_id, "pass_started", {"pass": "optimization", "max_iterations": 4})
    add_correct_iteration(store, run_id, 1, "optimization", PROGRAM_V2, PROGRAM_V1, ms=2.0, eager=4.2, compiled=2.6)
    store.set_best(run_id, 1, speedup_vs_eager=2.1, speedup_vs_compiled=1.3, candidate_ms=2.0)
    # iteration 2 as the built-in synthesizer writes it: its marker names the op its kernel computes; the profile
    # counts no FLOPs (no matrix product); the kernel ran 6 times over 6 checked calls
    marker = '# kforge-builtin: {"kernels": [{"label": "mul+sigmoid+add", "name": "swish_bias", "passes": 0}]}'
    add_correct_iteration(store, run_id, 2, "optimization", PROGRAM_V2 + "\n" + marker + "\n", PROGRAM_V2, ms=1.6,
                          eager=4.1, compiled=2.4, flops=0, launches=({"swish_bias": 6}, 6))
    store.set_best(run_id, 2, speedup_vs_eager=4.1 / 1.6, speedup_vs_compiled=2.4 / 1.6, candidate_ms=1.6)
    add_correct_iteration(store, run_id, 3, "optimization", PROGRAM_V2 + "\n# v4\n", PROGRAM_V2, ms=20.0, eager=4.8,
                          compiled=3.0)
    store.start_iteration(run_id, 4, "optimization")
    reason = ("no recommended move changes this program (applied: fuse, parallelize_rows, vectorize, block_shape, "
              "unroll; built with no change: fuse); nothing left to try")
    store.append_event(run_id, "program_missing", {"iteration": 4, "error": reason, "reply_excerpt": ""}, 4)
    store.finish_iteration(run_id, 4, "no_program", reason=reason)
    store.finish_run(run_id, "succeeded")
    return run_id


def seed_single_iteration_run(store: RunStore, problem_name: str = "single_iteration") -> str:
    """A run with one evaluated (correct, 16x slower than eager) iteration: the baselines must still be drawn, on a
    log time axis (64 ms against 2.5 ms)."""
    run_id = _builtin_run(store, problem_name, functional=1, optimization=0)
    add_correct_iteration(store, run_id, 0, "functional", PROGRAM_V1, PROGRAM_V0, ms=64.0, eager=4.0, compiled=2.5)
    store.set_best(run_id, 0, speedup_vs_eager=4.0 / 64.0, speedup_vs_compiled=2.5 / 64.0, candidate_ms=64.0)
    store.finish_run(run_id, "succeeded")
    return run_id


JUDGE_FLAG = "the judge could not confirm the reported times (on a busy machine)"


def head_to_head_data(best: int = 2, other: int = 1) -> dict:
    """A judged head-to-head as the loop writes it (`loop.head_to_head.contest_event`): #best fastest but noisy
    (median 1.4x its fastest trial), #other flagged by the judge's clock, both baselines, a re-time warning."""
    from kforge_core.loop.head_to_head import contest_event  # the loop's imports only where a test asks for this
    from kforge_core.loop.types import Attempt

    def t(median, low, high):
        return {"median_ms": median, "min_ms": low, "max_ms": high, "trials": 7}

    checks = [{"name": "timed outputs match eager", "passed": True, "detail": "12 calls"},
              {"name": "judge's clock", "passed": True, "detail": "within its bracket"}]
    result = {"contenders": {best: t(1.25, 0.9, 1.3), other: t(2.5, 2.4, 2.6)}, "eager": t(4.0, 3.9, 4.1),
              "compiled": t(2.5, 2.45, 2.6), "judged": True, "warnings": [f"re-timed: the first was noisy (#{best})"],
              "per_contender": {best: {"checks": checks, "warnings": []},
                                other: {"checks": checks, "warnings": [JUDGE_FLAG]}}}
    contenders = [Attempt(best, "optimization", "correct", "ok"), Attempt(other, "functional", "correct", "ok")]
    return contest_event(result, contenders, best, "best = the fastest median").data()


def seed_failed_run(store: RunStore, problem_name: str = "all_failed") -> str:
    """A run whose every iteration failed (two build failures): no timings at all."""
    run_id = _builtin_run(store, problem_name, functional=2, optimization=2)
    for index in (0, 1):
        store.start_iteration(run_id, index, "functional")
        store.append_event(run_id, "program_extracted", {"iteration": index, "code": PROGRAM_V0,
                                                         "language": "python", "notes": ""}, index)
        verdict = _verdict("compile_error", "the kernel did not build: expected ';' (line 12)")
        store.append_event(run_id, "verdict", {"iteration": index, "verdict": verdict}, index)
        store.finish_iteration(run_id, index, "compile_error", reason=verdict["reason"], code=PROGRAM_V0,
                               verdict=verdict)
    store.finish_run(run_id, "failed", error="no correct program in 2 functional step(s)")
    return run_id


def seed_unsupported_run(store: RunStore, problem_name: str = "cumsum_scan") -> str:
    """A run the built-in synthesizer could not write: one iteration without a program, ended `unsupported`."""
    run_id = _builtin_run(store, problem_name, functional=3, optimization=3)
    store.start_iteration(run_id, 0, "functional")
    reason = "nothing to synthesize: no node has a kernel template (unsupported: cumsum)"
    store.append_event(run_id, "program_missing", {
        "iteration": 0, "error": reason, "reply_excerpt": "", "unsupported": True,
        "coverage": "0 of 1 nodes (0%) synthesized: 0 in 0 custom kernels; kept in PyTorch: cumsum"}, 0)
    store.finish_iteration(run_id, 0, "no_program", reason=reason)
    store.finish_run(run_id, "unsupported", error=reason, stop_reason=reason)
    return run_id


def bench_records() -> list[dict]:
    """Benchmark rows as the runner writes them: a gain, a 0.31x slowdown, one near 1x, a failure."""
    def row(name, level, ms, eager, compiled):
        return {"problem": name, "level": level, "path": f"assets/problems/level{level}/{name}.py",
                "status": "succeeded", "correct": True, "candidate_ms": ms, "eager_ms": eager,
                "compiled_ms": compiled, "speedup_vs_eager": eager / ms, "speedup_vs_compiled": compiled / ms,
                "iterations": 4, "run_id": f"{abs(hash(name)) % 16**12:012x}", "wall_s": 30.0}
    return [row("01_relu", 1, 1.0, 2.5, 1.2), row("04_sigmoid", 1, 3.2, 1.0, 0.9),
            row("12_softmax", 1, 1.05, 1.1, 1.0),
            {"problem": "18_conv2d", "level": 1, "path": "assets/problems/level1/18_conv2d.py", "status": "failed",
             "correct": False, "error": "nothing to synthesize", "iterations": 1, "run_id": None, "wall_s": 5.0}]


# markup a candidate, a model or an endpoint could put in its text: an image with a script handler, a remote image,
# a link, a Streamlit colour directive, LaTeX
HOSTILE_TEXT = ("<img src=x onerror=alert(1)> ![pixel](http://evil.example/p.png) [click](http://evil.example/go) "
                ":red[FORGED] $\\pi$")


def seed_hostile_text_run(store: RunStore) -> str:
    """A failed run whose every field of text from outside KForge's code (a candidate's errors and output, a
    model's recommendations and analysis, an endpoint's error, a profile's names) holds HOSTILE_TEXT."""
    run_id = store.create_run("hostile_text", PROBLEM, "cpu", agent="llm", model="m",
                              config={"problem_name": "hostile_text", "target": "cpu", "agent": "llm"})
    store.start_run(run_id)
    store.append_event(run_id, "pass_started", {"pass": "functional", "max_iterations": 3})
    store.start_iteration(run_id, 0, "functional")
    store.append_event(run_id, "program_extracted", {"iteration": 0, "code": PROGRAM_V0, "language": "python",
                                                     "notes": ""}, 0)
    store.append_event(run_id, "eval_stage", {"iteration": 0, "stage": f"stage {HOSTILE_TEXT}"}, 0)
    store.append_event(run_id, "retry", {"iteration": 0, "agent": "generation", "where": "llm", "attempt": 1,
                                         "delay_s": 1.0, "error": f"endpoint said {HOSTILE_TEXT}"}, 0)
    store.append_event(run_id, "error", {"iteration": 0, "message": f"the candidate raised {HOSTILE_TEXT}",
                                         "where": "evaluation"}, 0)
    reason = f"RuntimeError: {HOSTILE_TEXT}\n# not a heading\n- not a list"
    verdict = _verdict("runtime_error", reason)
    store.append_event(run_id, "verdict", {"iteration": 0, "verdict": verdict}, 0)
    store.finish_iteration(run_id, 0, "runtime_error", reason=reason, code=PROGRAM_V0, verdict=verdict)
    add_correct_iteration(store, run_id, 1, "functional", PROGRAM_V1, PROGRAM_V0, ms=2.5)
    store.append_event(run_id, "profile", {"iteration": 1, "profile": {
        "tool": f"tool {HOSTILE_TEXT}", "device": "cpu", "per_forward_ms": 2.5, "custom_share": 0.9,
        "launches_per_forward": 1, "notes": [f"note {HOSTILE_TEXT}"],
        "kernels": [{"name": f"kforge::{HOSTILE_TEXT}", "calls_per_forward": 1, "ms_per_forward": 2.2, "share": 0.9,
                     "custom": True}]}, "roofline": {}}, 1)
    store.append_event(run_id, "recommendations", {
        "iteration": 1, "analyzed_iteration": 1, "agent_label": "an LLM", "notes": f"notes {HOSTILE_TEXT}",
        "text": f"## Analysis\n{HOSTILE_TEXT}\n```\nkeep [this](as code) <b>\n```",
        "recommendations": [{"title": f"title {HOSTILE_TEXT}", "change": f"change {HOSTILE_TEXT} in `x[i](j)`",
                             "why": f"why {HOSTILE_TEXT}", "expected_gain": "2x] :red[FORGED", "move": "m]"}]}, 1)
    store.append_event(run_id, "head_to_head", {"error": f"not decided {HOSTILE_TEXT}"})
    store.finish_run(run_id, "failed", error=f"the run failed: {HOSTILE_TEXT}", stop_reason=f"stopped {HOSTILE_TEXT}")
    return run_id
