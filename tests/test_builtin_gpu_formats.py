"""The built-in generator's GPU candidates, written here and run on GPUs: well-formed for each GPU target, and
the CUDA moves shaping the kernels.
"""

from __future__ import annotations

import re

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.eval.rules import check_candidate
from kforge_core.platform import get_platform
from kforge_core.synth.schedule import Schedule, read_marker
from tests.builtin_fixtures import LINEAR_GELU, NORMS, SOFTMAX_CHAIN, agent  # noqa: F401 - pytest fixtures


# ------------------------------------------------------------------- GPU formats (written here, run on GPUs)

@pytest.mark.parametrize("target", ["cuda", "triton", "metal"])
def test_gpu_candidates_are_well_formed(agent, target):
    """Without a GPU the CUDA / Triton / Metal candidates are still written, pass the static rules, and their kernel
    sources parse with the platforms' own signature readers (they were run on an H200 for CUDA and Triton)."""
    import ast

    gpu_agent = BuiltinGenerationAgent(size_class="cpu")
    gpu_agent._traces = agent._traces  # same problems, same traces
    platform = get_platform(target)
    full = Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True, warp_reduce=True)
    for source in (SOFTMAX_CHAIN, NORMS):
        for sched in (Schedule(), full):
            res = gpu_agent.synthesize(source, target, sched, "p")
            assert res.program, res.error
            ast.parse(res.program)
            assert not check_candidate(res.program, platform.module_name, tuple(platform.candidate_api))
            marker = read_marker(res.program)
            assert marker["target"] == target
            if target == "cuda":
                from platforms.cuda._signatures import parse_kernels

                src = re.search(r'SOURCE = r"""(.*?)"""', res.program, re.S).group(1)
                assert {k["name"] for k in marker["kernels"]} <= set(parse_kernels(src))
            elif target == "metal":
                from platforms.metal._signatures import parse_kernels

                src = re.search(r'SOURCE = r"""(.*?)"""', res.program, re.S).group(1)
                assert {k["name"] for k in marker["kernels"]} <= set(parse_kernels(src))
            else:
                assert "@triton.jit" in res.program


def test_cuda_moves_shape_the_kernels(agent):
    """The CUDA moves measured on an H200 stay in the written programs: 2-D blocks for elementwise kernels (short
    rows share a block), block-per-row kernels with a launch bound, double sums, and under `block_shape` a register
    cache that reads a multi-pass row from memory once."""
    gpu_agent = BuiltinGenerationAgent(size_class="cpu")
    gpu_agent._traces = agent._traces
    full = Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True, warp_reduce=True)
    norms = gpu_agent.synthesize(NORMS, "cuda", full, "p").program
    # the bound's size (1024, or 512 for a cache of several operands) is tested in test_builtin_cuda_writer.py
    assert re.search(r"__launch_bounds__\((1024|512)\)", norms) and "kf_block_sum_d(" in norms
    assert re.search(r"float4 C\d+\[(4|8)\];", norms), "block_shape must cache the row in registers"
    assert "#define KF_FAST_MATH 1" in norms  # vectorize takes the fast exp
    no_block = gpu_agent.synthesize(NORMS, "cuda", Schedule(fuse=True, parallel=True, vectorize=True), "p").program
    assert not re.search(r"float4 C\d+\[", no_block)
    plain = gpu_agent.synthesize(SOFTMAX_CHAIN, "cuda", Schedule(fuse=True), "p").program
    assert "KF_FAST_MATH" not in plain.split('SOURCE = r"""')[1].split("#ifdef")[0]
    elementwise = gpu_agent.synthesize(LINEAR_GELU, "cuda", full, "p").program
    assert "block=(tx, ty)" in elementwise and "threadIdx.y" in elementwise
