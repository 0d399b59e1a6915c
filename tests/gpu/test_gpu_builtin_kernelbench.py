"""GPU half of `tests/test_builtin_kernelbench.py`: the built-in candidates for the families added for KernelBench's
reach (reductions over any dims and softmax over a leading dim as column kernels, argmax/argmin with int64 outputs,
scans, training-mode BatchNorm, pow with any exponent, pooling: `tests/pooling_cases.py`) judged by the real evaluator
on CUDA and Triton, plain and with every move; and BatchNorm's running statistics after several calls, and long row
scans (a warp a row). Skipped without an NVIDIA GPU; `scripts/gpu_check.sh
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


def _gpu_candidate(target: str, case: str, source: str, optimized: bool):
    """The built-in candidate for `target`, plain or with every move, with nothing kept in PyTorch."""
    from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
    from kforge_core.platform import get_platform
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
    return res


def _judge_on_gpu(target: str, case: str, source: str, optimized: bool) -> None:
    from kforge_core.eval.evaluator import EvalOptions, evaluate
    from kforge_core.problem import load_problem

    res = _gpu_candidate(target, case, source, optimized)
    v = evaluate(load_problem(text=source, name=case), res.program, target, EvalOptions(timing=False))
    assert v.status == "correct", f"{v.status}: {v.reason}\n{v.compile_log}\n{v.log_tail}"


@pytest.mark.parametrize("target", ["cuda", "triton"])
def test_batch_norm_running_stats_and_long_scans_on_gpu(target):
    """Training-mode BatchNorm's running statistics match PyTorch's after three calls; cumsum / cumprod / reversed
    cumsum along rows of 5000 (many warp steps with a carry) and along a leading dim match too."""
    from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
    from kforge_core.platform import get_platform
    from kforge_core.synth.schedule import Schedule
    from tests.kernelbench_cases import problem

    if target == "triton":
        pytest.importorskip("triton")
    scans = problem(forward="return (torch.cumsum(x, 1), torch.cumprod(1.0 + x * 1e-3, 1), "
                            "torch.cumsum(x.flip(1), 1).flip(1), torch.cumsum(x, 0))",
                    inputs="[torch.randn(64, 5000)]")
    for case in (CASES["batch_norm_train"], scans):
        res = BuiltinGenerationAgent().synthesize(case, get_platform(target).spec(), Schedule(), "gpu_case")
        assert res.program, res.error
        ref_ns: dict = {}
        exec(compile(case, "problem", "exec"), ref_ns)  # noqa: S102 - our own problem
        cand_ns: dict = {}
        exec(compile(res.program, "candidate", "exec"), cand_ns)  # noqa: S102 - our own synthesized program
        ref, new = ref_ns["Model"]().cuda(), cand_ns["ModelNew"]().cuda()
        new.load_state_dict(ref.state_dict())
        for _ in range(3):
            x = ref_ns["get_inputs"]()[0].cuda()
            for a, b in zip(ref(x), new(x)):
                torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-3)
        for key, value in ref.state_dict().items():
            torch.testing.assert_close(new.state_dict()[key], value, rtol=1e-5, atol=1e-5, msg=key)


@pytest.mark.parametrize("target", ["cuda", "triton"])
@pytest.mark.parametrize("optimized", [False, True])
def test_window_kernels_at_size_and_on_special_values_on_gpu(target, optimized):
    """The window kernels (tests/pooling_cases.py's pools_window: KernelBench level1/42's 4x4 window at stride 1,
    partial ceil_mode windows, count_include_pad=False, divisor_override, a fused prologue) on a larger input (a
    grid-stride loop over more outputs than threads) and on NaN / infinities, run directly against PyTorch."""
    from tests.pooling_cases import POOL_COMBINED

    src = POOL_COMBINED["pools_window"]
    res = _gpu_candidate(target, "pools_window", src, optimized)
    ref_ns: dict = {}
    exec(compile(src, "problem", "exec"), ref_ns)  # noqa: S102 - our own problem
    cand_ns: dict = {}
    exec(compile(res.program, "candidate", "exec"), cand_ns)  # noqa: S102 - our own synthesized program
    ref, new = ref_ns["Model"]().cuda(), cand_ns["ModelNew"]().cuda()
    big = torch.randn(16, 32, 257, 263, device="cuda")
    special = torch.randn(2, 3, 11, 13, device="cuda")
    special[0, 0, 3, 4] = float("nan")
    special[1, 2, :4, :4] = -float("inf")
    special[0, 1, 6, 6] = float("inf")
    for x in (big, special):
        for a, b in zip(ref(x), new(x)):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, equal_nan=True)
