"""GPU half of `tests/test_builtin_kernelbench.py`: the built-in candidates for the families added for KernelBench's
reach (reductions over any dims, argmax/argmin with int64 outputs, pow with any exponent, pooling:
`tests/pooling_cases.py`) judged by the real evaluator on CUDA and Triton, plain and with every move. Skipped without an NVIDIA GPU; `scripts/gpu_check.sh
tests` runs them."""

from __future__ import annotations

import pytest
import torch

from tests.kernelbench_cases import CASES
from tests.pooling_cases import POOL_CASES

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs an NVIDIA GPU: torch.cuda.is_available() is False (CPU-only torch or no GPU); run "
           "scripts/gpu_check.sh on a GPU machine")]


@pytest.mark.parametrize("target", ["cuda", "triton"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("optimized", [False, True])
def test_kernelbench_family_correct_on_gpu(target, case, optimized):
    _judge_on_gpu(target, case, CASES[case], optimized)


@pytest.mark.parametrize("target", ["cuda", "triton"])
@pytest.mark.parametrize("case", sorted(POOL_CASES))
@pytest.mark.parametrize("optimized", [False, True])
def test_pooling_correct_on_gpu(target, case, optimized):
    _judge_on_gpu(target, case, POOL_CASES[case], optimized)


def _judge_on_gpu(target: str, case: str, source: str, optimized: bool) -> None:
    from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
    from kforge_core.eval.evaluator import EvalOptions, evaluate
    from kforge_core.platform import get_platform
    from kforge_core.problem import load_problem
    from kforge_core.synth.schedule import Schedule, order_for

    if target == "triton":
        pytest.importorskip("triton")
    sched = Schedule()
    if optimized:
        for move in order_for("cuda"):
            sched = sched.with_move(move)
    res = BuiltinGenerationAgent().synthesize(source, get_platform(target).spec(), sched, case)
    assert res.program, res.error
    assert "kept in PyTorch" not in res.notes, res.notes
    v = evaluate(load_problem(text=source, name=case), res.program, target, EvalOptions(timing=False))
    assert v.status == "correct", f"{v.status}: {v.reason}\n{v.compile_log}\n{v.log_tail}"
