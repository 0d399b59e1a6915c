"""The built-in synthesizer's losses (`synth/lower/losses.py`): cross_entropy, smooth_l1 / huber, kl_div, triplet
margin, mse / l1, functional and module spellings, every reduction. CPU candidates judged by the real evaluator
(plain and with every move); every GPU writer writes them with nothing kept in PyTorch, and the CUDA kernels compile
with NVRTC where the library loads (no GPU needed). The unsupported options stay in PyTorch and say why."""

from __future__ import annotations

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.platform import get_platform
from kforge_core.synth.schedule import Schedule, first_schedule
from tests.loss_cases import KEPT_CASES, LOSS_CASES
from tests.nvrtc_only import assert_builtin_compiles, nvrtc
from tests.test_builtin_kernelbench import BEST, judge, synthesized, writes_every_case

if not get_platform("cpu").availability().ok:  # pragma: no cover - CI has g++
    pytest.skip("no C++ compiler", allow_module_level=True)


@pytest.fixture(scope="module")
def agent() -> BuiltinGenerationAgent:
    return BuiltinGenerationAgent()


@pytest.mark.parametrize("case", sorted(LOSS_CASES))
def test_losses_are_kernels_and_correct_on_the_cpu(agent, case):
    src = LOSS_CASES[case]
    for sched in (Schedule(), BEST):
        res = synthesized(agent, src, sched, name=case)
        judge(src, res.program, case)


def test_cross_entropy_picks_the_target_in_the_row_kernel(agent):
    """The target's logit is picked by comparing the column index with the target (as float32, converted once
    outside the kernels), in the pass that finds the row's max; nothing in forward but that conversion."""
    res = synthesized(agent, LOSS_CASES["cross_entropy"], BEST, name="cross_entropy")
    assert "targets.to(torch.float32).view(48, 1)" in res.program
    assert "((float)(c) == r1)" in res.program
    assert "cross_entropy(" not in res.program.split("class ModelNew")[1]  # no PyTorch loss call in forward


@pytest.mark.parametrize("target", ["cuda", "triton", "metal"])
def test_gpu_writers_write_every_loss(agent, target):
    writes_every_case(agent, target, LOSS_CASES, column_only=set())


@pytest.mark.skipif(nvrtc() is None, reason="NVRTC does not load here (set KFORGE_NVRTC=/path/to/libnvrtc.so.12 to "
                                            "compile the kernels without a GPU); CI has none")
@pytest.mark.parametrize("case", sorted(LOSS_CASES))
def test_loss_kernels_compile_with_nvrtc(case):
    assert_builtin_compiles(LOSS_CASES[case], case, (first_schedule("cuda"), Schedule(
        fuse=True, parallel=True, vectorize=True, block=True, unroll=True, warp_reduce=True)))


@pytest.mark.parametrize("case", sorted(KEPT_CASES))
def test_unsupported_loss_options_stay_in_pytorch_and_say_why(agent, case):
    src, why = KEPT_CASES[case]
    res = agent.synthesize(src, "cpu", Schedule(), case)
    if res.program is None:  # the loss was all there was: no candidate, and the agent's answer says why
        assert why in res.error, res.error
        return
    assert "kept in PyTorch" in res.notes and why in res.coverage, res.coverage
    judge(src, res.program, case)  # with the loss a PyTorch call, still correct
