"""Pooling in the built-in synthesizer (synth/lower/pooling.py): every supported MaxPool / AvgPool / adaptive
variant is written with nothing kept in PyTorch and matches PyTorch on the CPU (the real evaluator, correctness
only); every unsupported variant stays in PyTorch with its reason in the coverage note; the GPU writers write them
all (statically here; tests/gpu/test_gpu_builtin_kernelbench.py judges them on the device)."""

from __future__ import annotations

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.lower.pooling import out_size, pooling_kind
from kforge_core.synth.schedule import Schedule
from tests.pooling_cases import POOL_COMBINED, POOL_UNSUPPORTED, POOL_UNSUPPORTED_REASONS
from tests.test_builtin_kernelbench import BEST, judge, synthesized, writes_every_case


@pytest.fixture(scope="module")
def agent() -> BuiltinGenerationAgent:
    return BuiltinGenerationAgent()


@pytest.mark.parametrize("case", sorted(POOL_COMBINED))
def test_pooling_matches_pytorch_on_the_cpu(agent, case):
    """Every supported variant (POOL_CASES, grouped by input rank), plain; the 3-d group with every CPU move."""
    src = POOL_COMBINED[case]
    res = synthesized(agent, src, name=case)
    assert ".unfold(" in res.program, "a window view feeds the kernel"
    if case == "pools_2d":  # padding: a -inf padded copy, said in the notes
        assert "torch.nn.functional.pad(" in res.program and "value=-math.inf" in res.program
        assert "likely slower than eager: MaxPool2d reads its input through a copy of its windows after a " \
               "padding copy" in res.notes
    judge(src, res.program, case)
    if case == "pools_3d":
        judge(src, synthesized(agent, src, BEST, name=case).program, case)


def test_unsupported_pooling_stays_in_pytorch_with_its_reason(agent):
    """No candidate at all (every node stays in PyTorch): the agent says why for each pool."""
    res = agent.synthesize(POOL_UNSUPPORTED, "cpu", Schedule(), "unsupported_pools")
    assert res.program is None and "kept in PyTorch: maxpool2d x3, avgpool2d x2, adaptiveavgpool2d" in res.notes
    for ctor, _, reason in POOL_UNSUPPORTED_REASONS.values():
        assert reason in res.error, (ctor, res.error)


@pytest.mark.parametrize("target", ["cuda", "triton", "metal"])
def test_gpu_writers_write_every_pooling_case(agent, target):
    writes_every_case(agent, target, POOL_COMBINED)


def test_pooled_sizes_follow_pytorch():
    import torch

    for length, k, s, p, d, ceil in [(9, 2, 2, 0, 1, True), (29, 4, 1, 2, 3, False), (13, 3, 2, 1, 3, True),
                                     (10, 3, 3, 1, 1, True), (7, 7, 7, 3, 1, True)]:
        want = torch.nn.functional.max_pool1d(torch.zeros(1, 1, length), k, s, p, d, ceil_mode=ceil).shape[-1]
        assert out_size(length, k, s, p, d, ceil) == want, (length, k, s, p, d, ceil)
    assert pooling_kind("module:AdaptiveAvgPool3d") == ("adaptive_avg", 3)
    assert pooling_kind("max_pool1d") == ("max", 1) and pooling_kind("module:LPPool2d") is None
