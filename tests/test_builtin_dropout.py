"""Dropout and the built-in synthesizer: in training mode (nn.Module's default, as KernelBench's level 2 leaves its
Matmul_Dropout_Softmax) the mask comes from torch's generator, which a kernel cannot reproduce, so the draw stays a
PyTorch call with that reason and the rest becomes kernels; the candidate is judged correct because both sides run
after the same seed. With p=0 or training=False it is the identity and nothing stays in PyTorch."""

from __future__ import annotations

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.platform import get_platform
from kforge_core.synth.schedule import Schedule
from tests.kernelbench_cases import problem
from tests.test_builtin_kernelbench import BEST, judge, synthesized

if not get_platform("cpu").availability().ok:  # pragma: no cover - CI has g++
    pytest.skip("no C++ compiler", allow_module_level=True)

TRAINING = problem(forward="return torch.softmax(self.dropout(x * 2.0), dim=1)", inputs="[torch.randn(8, 33)]",
                   params="p", init="[0.3]", ctor="self.dropout = nn.Dropout(p)")
IDENTITY = problem(forward="return torch.softmax(torch.nn.functional.dropout(self.d0(x), 0.3, training=False), "
                           "dim=1)", inputs="[torch.randn(8, 33)]", ctor="self.d0 = nn.Dropout(0.0)")


@pytest.fixture(scope="module")
def agent() -> BuiltinGenerationAgent:
    return BuiltinGenerationAgent()


def test_training_mode_dropout_stays_in_pytorch_and_says_why(agent):
    for sched in (Schedule(), BEST):
        res = agent.synthesize(TRAINING, "cpu", sched, "dropout_train")
        assert res.program, res.error
        assert "kept in PyTorch: dropout" in res.notes, res.notes
        assert "draws its mask from torch's random number generator" in res.coverage, res.coverage
        judge(TRAINING, res.program, "dropout_train")


def test_dropout_that_is_the_identity_is_no_kernel_and_nothing_kept(agent):
    for sched in (Schedule(), BEST):
        res = synthesized(agent, IDENTITY, sched, name="dropout_identity")
        judge(IDENTITY, res.program, "dropout_identity")
