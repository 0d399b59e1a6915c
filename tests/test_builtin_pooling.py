"""Pooling in the built-in synthesizer (synth/lower/pooling.py, backends/pool_kernels.py): every supported MaxPool /
AvgPool / adaptive variant is written with nothing kept in PyTorch, as a window kernel reading its input in place
(no padded or unfolded copy), and matches PyTorch on the CPU (the real evaluator, correctness only; NaN and
infinities run directly); every unsupported variant stays in PyTorch with its reason in the coverage note, and so
do the window-only variants on Metal (no window kernels: the window-view path); the GPU writers write them all
(statically here, the CUDA source compiled by nvcc where it is installed; tests/gpu/test_gpu_builtin_kernelbench.py
judges them on the device)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.lower.pooling import out_size, pooling_kind
from kforge_core.synth.schedule import Schedule
from tests.pooling_cases import (POOL_CASES, POOL_COMBINED, POOL_UNSUPPORTED, POOL_UNSUPPORTED_REASONS,
                                 POOL_WINDOW_ONLY, POOL_WINDOW_ONLY_REASONS)
from tests.test_builtin_kernelbench import BEST, judge, synthesized, writes_every_case


@pytest.fixture(scope="module")
def agent() -> BuiltinGenerationAgent:
    return BuiltinGenerationAgent()


@pytest.mark.parametrize("case", sorted(POOL_COMBINED))
def test_pooling_matches_pytorch_on_the_cpu(agent, case):
    """Every supported variant (POOL_CASES, grouped by input rank), plain; the 3-d group with every CPU move."""
    src = POOL_COMBINED[case]
    res = synthesized(agent, src, name=case)
    assert "= kf_pool_view(" in res.program, "a window kernel reads the input"
    # in place: no padded copy, no window view, no slowness note
    assert ".unfold(" not in res.program and "torch.nn.functional.pad(" not in res.program
    assert "reads its input through a copy" not in res.notes
    judge(src, res.program, case)
    if case in ("pools_3d", "pools_window"):
        judge(src, synthesized(agent, src, BEST, name=case).program, case)


def test_unsupported_pooling_stays_in_pytorch_with_its_reason(agent):
    """No candidate at all (every node stays in PyTorch): the agent says why for each pool; on Metal, which has no
    window kernels, the window-only variants too."""
    res = agent.synthesize(POOL_UNSUPPORTED, "cpu", Schedule(), "unsupported_pools")
    assert res.program is None and "kept in PyTorch: maxpool2d, adaptiveavgpool2d" in res.notes
    for ctor, _, reason in POOL_UNSUPPORTED_REASONS.values():
        assert reason in res.error, (ctor, res.error)
    res = agent.synthesize(POOL_WINDOW_ONLY, "metal", Schedule(), "window_only_pools")
    assert res.program is None and "kept in PyTorch: maxpool2d x2, avgpool2d x2" in res.notes
    for ctor, _, reason in POOL_WINDOW_ONLY_REASONS.values():
        assert reason in res.error, (ctor, res.error)


@pytest.mark.parametrize("target", ["cuda", "triton", "metal"])
def test_gpu_writers_write_every_pooling_case(agent, target):
    writes_every_case(agent, target, POOL_COMBINED, column_only={"pools_window"}, view="= kf_pool_view(")


def _candidate(agent, source: str, target: str, sched: Schedule):
    res = agent.synthesize(source, target, sched, "pool")
    assert res.program and "kept in PyTorch" not in res.notes, res.error or res.notes
    ns: dict = {}
    exec(compile(res.program, "candidate", "exec"), ns)  # noqa: S102 - our own synthesized program
    return res, ns["ModelNew"]


@pytest.mark.parametrize("sched", [Schedule(), BEST], ids=["plain", "best"])
def test_window_kernels_follow_pytorch_on_nan_and_infinities(agent, sched):
    """Run directly (no evaluator): a NaN in a window wins the max (PyTorch's rule) and stays out of the others; an
    all -inf window gives -inf; infinities in an average; every output of a row-tail chunk written."""
    import torch

    src = POOL_COMBINED["pools_window"]
    ns: dict = {}
    exec(compile(src, "problem", "exec"), ns)  # noqa: S102 - our own problem
    ref = ns["Model"]()
    new = _candidate(agent, src, "cpu", sched)[1]()
    x = torch.randn(2, 3, 11, 13)
    x[0, 0, 3, 4] = float("nan")
    x[1, 2, :4, :4] = -float("inf")
    x[0, 1, 6, 6] = float("inf")
    for a, b in zip(ref(x), new(x)):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, equal_nan=True)
    wide = torch.randn(2, 2, 5, 600)  # the last dim in three 256-output chunks
    for a, b in zip(ref(wide), new(wide)):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit) to compile the kernels offline; "
                    "the GPU tests compile them through NVRTC")
def test_cuda_window_kernels_compile(agent, tmp_path):
    """Every pooling problem's CUDA source (window kernels, the fused chains and their row values), with every
    move, compiles."""
    from kforge_core.synth.schedule import order_for

    full = Schedule()
    for move in order_for("cuda"):
        full = full.with_move(move)
    for case, src in {**POOL_COMBINED, "window_chains": POOL_CASES["window_chains"]}.items():
        res = agent.synthesize(src, "cuda", full, case)
        assert res.program, res.error
        cu = tmp_path / f"{case}.cu"
        cu.write_text(re.search(r'SOURCE = r"""(.*?)"""', res.program, re.S).group(1))
        out = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-O1", "-o", str(tmp_path / f"{case}.cubin"), str(cu)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{case}: {out.stderr}"


def test_pooled_sizes_follow_pytorch():
    import torch

    for length, k, s, p, d, ceil in [(9, 2, 2, 0, 1, True), (29, 4, 1, 2, 3, False), (13, 3, 2, 1, 3, True),
                                     (10, 3, 3, 1, 1, True), (7, 7, 7, 3, 1, True)]:
        want = torch.nn.functional.max_pool1d(torch.zeros(1, 1, length), k, s, p, d, ceil_mode=ceil).shape[-1]
        assert out_size(length, k, s, p, d, ceil) == want, (length, k, s, p, d, ceil)
    assert pooling_kind("module:AdaptiveAvgPool3d") == ("adaptive_avg", 3)
    assert pooling_kind("max_pool1d") == ("max", 1) and pooling_kind("module:LPPool2d") is None
