"""Constants made in forward (`synth/lower/constants.py`): 0-dim `torch.tensor(number)` (a traced call, or the
`_tensor_constant` fx makes of it, whose value the tracer records) read by the kernels as literals, the PyTorch
calls and `x.device` glue nothing reads any more dropped; `zeros_like` in a fused `cat` (level 1's exclusive cumsum)
written by the cat's kernel; fills elsewhere left as allocations. CPU candidates judged by the real evaluator; every
GPU writer writes them; the CUDA kernels compile with NVRTC where the library loads."""

from __future__ import annotations

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.platform import get_platform
from kforge_core.synth.schedule import Schedule, first_schedule
from tests.constant_cases import CONSTANT_CASES, KEPT_CONSTANT_CASES
from tests.nvrtc_only import assert_builtin_compiles, nvrtc
from tests.test_builtin_kernelbench import BEST, judge, synthesized, writes_every_case

if not get_platform("cpu").availability().ok:  # pragma: no cover - CI has g++
    pytest.skip("no C++ compiler", allow_module_level=True)


@pytest.fixture(scope="module")
def agent() -> BuiltinGenerationAgent:
    return BuiltinGenerationAgent()


def _forward(program: str) -> str:
    return program.split("def forward(", 1)[1]


@pytest.mark.parametrize("case", sorted(CONSTANT_CASES))
def test_constants_are_correct_on_the_cpu(agent, case):
    src = CONSTANT_CASES[case]
    for sched in (Schedule(), BEST):
        res = agent.synthesize(src, "cpu", sched, case)
        assert res.program, res.error
        kept = res.notes.split("kept in PyTorch: ")[1] if "kept in PyTorch" in res.notes else ""
        assert kept in ("", "conv2d"), res.notes  # only the vendor convolution stays in PyTorch
        judge(src, res.program, case)


def test_a_tensor_constant_is_a_literal_and_nothing_in_forward(agent):
    """fx's `_tensor_constant0` (torch.tensor(0.5) with nothing traced in it) and `torch.tensor(0.0,
    device=x.device)`: the kernels read 0.5f / 0.0f; forward makes no tensor for them and reads no `.device`."""
    res = synthesized(agent, CONSTANT_CASES["tensor_call"], BEST, name="tensor_call")
    fwd = _forward(res.program)
    assert "torch.tensor(" not in fwd and ".device\n" not in fwd and "t_getattr" not in fwd
    assert "-0.25f" in res.program and "1.0f" in res.program
    res = agent.synthesize(CONSTANT_CASES["tensor_constant"], "cpu", BEST, "tensor_constant")
    assert "_tensor_constant" not in res.program and "0.5f" in res.program


def test_zeros_like_in_a_cat_is_written_by_the_cat_kernel(agent):
    """Level 1's exclusive cumsum: the zero column is a piece of the cat's kernel, no zeros tensor allocated."""
    res = synthesized(agent, CONSTANT_CASES["cumsum_exclusive"], BEST, name="cumsum_exclusive")
    assert "zeros_like" not in _forward(res.program)


@pytest.mark.parametrize("target", ["cuda", "triton", "metal"])
def test_gpu_writers_write_the_constants(agent, target):
    cases = {k: v for k, v in CONSTANT_CASES.items() if k not in ("cumsum_exclusive", "tensor_constant")}
    writes_every_case(agent, target, cases, column_only=set())
    for case in ("tensor_constant", "cumsum_exclusive"):  # a vendor conv; a scan and a cat kept on some targets
        for sched in (Schedule(), BEST):
            res = agent.synthesize(CONSTANT_CASES[case], target, sched, case)
            assert res.program or target == "metal", res.error
            assert not res.program or "_tensor_constant" not in res.program


@pytest.mark.skipif(nvrtc() is None, reason="NVRTC does not load here (set KFORGE_NVRTC=/path/to/libnvrtc.so.12 to "
                                            "compile the kernels without a GPU); CI has none")
@pytest.mark.parametrize("case", sorted(CONSTANT_CASES))
def test_constant_kernels_compile_with_nvrtc(case):
    assert_builtin_compiles(CONSTANT_CASES[case], case, (first_schedule("cuda"), BEST))


@pytest.mark.parametrize("case", sorted(KEPT_CONSTANT_CASES))
def test_constants_the_kernels_do_not_take_stay_in_pytorch(agent, case):
    src, why = KEPT_CONSTANT_CASES[case]
    res = agent.synthesize(src, "cpu", Schedule(), case)
    text = res.coverage if res.program else res.error
    assert why in text, text
    if res.program:
        judge(src, res.program, case)
