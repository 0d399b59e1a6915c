"""The judge on the GPU (docs/EVALUATOR.md): the CUDA and Triton examples judged out of process (tensors through
device memory shared by descriptor: test_gpu_handover.py), the same in one process
(KFORGE_JUDGE=0), and hostile variants of the CUDA example that reach into their own process with the static rules
and guards disarmed (KFORGE_UNSAFE_DISARM=1): each must fail because the judge is out of reach. Skipped without an
NVIDIA GPU; run with `bash scripts/gpu_check.sh judge`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs an NVIDIA GPU: torch.cuda.is_available() is False; run scripts/gpu_check.sh judge on a GPU machine")]

EXAMPLES = Path(__file__).resolve().parents[2] / "platforms" / "examples"
QUICK = {"baselines": False, "timing_options": {"min_trials": 5, "max_trials": 20, "budget_s": 0.5}}

# appended to an example candidate: its output halved (wrong, still varying with the inputs)
HALVED = """

_Honest = ModelNew


class ModelNew(_Honest):
    def forward(self, *args):
        return super().forward(*args) * 0.5
"""
LOOSEN = """
import sys as _sys
for _policy in _sys.modules["kforge_core.eval.tolerance"].POLICIES.values():
    for _dtype in ("fp32", "half", "bf16", "fp64"):
        for _field in ("atol", "rtol", "rel_l2_max"):
            object.__setattr__(getattr(_policy, _dtype), _field, 1e30)
"""
FORGE_TIMER = """
import gc as _gc, itertools as _it
for _obj in _gc.get_objects():
    if type(_obj).__name__.endswith("Timer") and hasattr(_obj, "_clock"):
        _obj._clock = _it.count(0, 1000).__next__
        if hasattr(_obj, "_elapsed"):  # the CUDA timer's device clock: every event pair 1 us apart
            _obj._elapsed = lambda a, b: 0.001
"""


def _evaluate(target: str, source: str | None = None, **opts):
    from kforge_core.eval.evaluator import EvalOptions, evaluate
    from kforge_core.problem import Problem

    problem = EXAMPLES / target / "problem.py"
    source = source if source is not None else (EXAMPLES / target / "candidate.py").read_text()
    return evaluate(Problem("example", problem.read_text(), problem), source, target,
                    EvalOptions(timeout_s=240, **opts))


@pytest.mark.parametrize("target", ["cuda", "triton"])
@pytest.mark.parametrize("judge", ["1", "0"])
def test_example_is_correct_judged_and_alone(monkeypatch, target, judge):
    monkeypatch.setenv("KFORGE_JUDGE", judge)
    v = _evaluate(target, **QUICK)
    assert v.status == "correct", (v.reason, v.log_tail[-3000:])
    names = [c["name"] for c in v.checks]
    assert ("judged out of process" in names) == (judge == "1"), names
    if judge == "1":
        clock = next(c for c in v.checks if c["name"] == "judge's clock")
        print(f"{target}: {clock['detail']}; candidate {v.candidate_ms} ms, eager {v.eager_ms} ms")


def test_loosened_tolerance_fails_with_the_judge(monkeypatch):
    monkeypatch.setenv("KFORGE_UNSAFE_DISARM", "1")
    source = (EXAMPLES / "cuda" / "candidate.py").read_text() + LOOSEN + HALVED
    monkeypatch.setenv("KFORGE_JUDGE", "0")
    alone = _evaluate("cuda", source, timing=False)
    monkeypatch.setenv("KFORGE_JUDGE", "1")
    judged = _evaluate("cuda", source, timing=False)
    assert alone.status == "correct", (alone.status, alone.reason)
    assert judged.status == "incorrect", (judged.status, judged.reason, judged.log_tail[-2000:])


def test_forged_timer_is_rejected_on_the_gpu(monkeypatch):
    """On accelerators a forged clock is rejected: by the judge's clock check (reports far below its brackets) or,
    where the forged time is also below what the hardware can do, by the floor check first (seen on an H200)."""
    monkeypatch.setenv("KFORGE_UNSAFE_DISARM", "1")
    monkeypatch.setenv("KFORGE_JUDGE", "1")
    source = FORGE_TIMER + (EXAMPLES / "cuda" / "candidate.py").read_text()
    v = _evaluate("cuda", source, **QUICK)
    assert v.status == "rejected" and any(why in v.reason for why in (
        "judge's own clock", "below the CPU time they used", "below the hardware floor")), \
        (v.status, v.reason, v.log_tail[-2000:])


def test_cpu_probe_read_on_the_gpu(monkeypatch):
    """The caller's CPU probe is read for a GPU candidate's process too: the deferred-work check ran and passed for
    the honest example (GPU work is not CPU time; the check must not flag a kernel that waits on the device)."""
    monkeypatch.setenv("KFORGE_JUDGE", "1")
    v = _evaluate("cuda", **QUICK)
    assert v.status == "correct", (v.reason, v.log_tail[-3000:])
    cpu = next(c for c in v.checks if c["name"] == "CPU time outside calls")
    assert cpu["passed"] and "not checked" not in cpu["detail"], cpu
    print(f"cuda: {cpu['detail']}")


def test_contest_judged_per_contender_on_the_gpu(monkeypatch):
    """A head-to-head of the CUDA example against itself, judged: one candidate's process per contender, both timed,
    each with the judge's checks."""
    from kforge_core.eval.evaluator import EvalOptions, head_to_head
    from kforge_core.problem import Problem

    monkeypatch.setenv("KFORGE_JUDGE", "1")
    problem = EXAMPLES / "cuda" / "problem.py"
    source = (EXAMPLES / "cuda" / "candidate.py").read_text()
    result = head_to_head(Problem("example", problem.read_text(), problem), {1: source, 2: source}, "cuda",
                          EvalOptions(timeout_s=240, **QUICK))
    assert "error" not in result, result
    # the machine's own warnings (e.g. no OS isolation under gVisor) are not the contest's
    contest_warnings = [w for w in result["warnings"] if not w.startswith("evaluated without OS isolation")]
    assert set(result["contenders"]) == {1, 2} and not contest_warnings, result
    assert {c["name"] for c in result["checks"]} >= {"c1: judge's clock", "c2: CPU time outside calls"}, result
