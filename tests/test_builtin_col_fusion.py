"""Elementwise chains fused into the column and window kernels (synth/plan/col_fusion.py): under the fuse move the
prologue and epilogue around each column or window kernel become part of it, with the per-channel tensors they read
as row values (fewer kernels, the same results on the CPU, run by the real evaluator), only where the graph allows;
without the move nothing is fused."""

from __future__ import annotations

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.lower.colops import ColOp
from kforge_core.synth.lower.graph import Prim, lower
from kforge_core.synth.plan.col_fusion import fuse_column_chains
from kforge_core.synth.plan.fusion import build_plan
from kforge_core.synth.schedule import Schedule
from tests.kernelbench_cases import CASES, problem
from tests.pooling_cases import POOL_CASES
from tests.test_builtin_kernelbench import BEST, judge, synthesized, writes_every_case


@pytest.fixture(scope="module")
def agent() -> BuiltinGenerationAgent:
    return BuiltinGenerationAgent()


def _lowered(agent, source: str):
    return lower(agent.trace(source, "small"), columns=True)


def _kernels(low, fuse: bool) -> tuple[int, list]:
    plan = build_plan(low, fuse=fuse)
    return len(plan.kernels), plan.columns


def test_chains_move_into_their_column_kernels(agent):
    """Every chain of column_chains goes into its kernel: no elementwise kernel is left but the one around the
    value read twice; without the fuse move every chain keeps its own kernel."""
    low = _lowered(agent, CASES["column_chains"])
    plain_k, plain_cols = _kernels(low, fuse=False)
    fused_k, cols = _kernels(low, fuse=True)
    assert len(cols) == len(plain_cols) == 8 and not any(c.pre or c.post for c in plain_cols)
    # left: y = x * 0.25 with y.sum() (y is read twice), and the mean's epilogue adding y.sum() (a tensor)
    assert plain_k == 19 and fused_k == 2
    chains = [(c.label, [p.fn for p in c.pre], [p.fn for p in c.post]) for c in cols]
    assert chains == [("min(dim)", ["mul"], ["tanh"]), ("softmax", ["sub"], ["sigmoid", "mul"]),
                      ("logsumexp", ["tanh"], ["relu"]), ("cumsum", ["mul"], ["add"]), ("cumsum", ["mul"], ["add"]),
                      ("MaxPool2d", ["sub", "hardswish"], ["clamp_min", "clamp_max", "mul"]),
                      ("argmax", ["mul"], []),  # an int64 result takes no epilogue
                      ("mean", [], [])]
    # the lowered program handed in is unchanged
    assert not any(isinstance(it, ColOp) and (it.pre or it.post) for it in low.items)


def test_window_chains_read_row_values(agent):
    """A window kernel's chains also take tensors of one value per row (0-d scales, per-channel biases): every
    elementwise op of window_chains goes into its pool's kernel, each such tensor an `aux` row value."""
    low = _lowered(agent, POOL_CASES["window_chains"])
    assert _kernels(low, fuse=False)[0] >= 6
    fused_k, cols = _kernels(low, fuse=True)
    assert fused_k == 0 and len(cols) == 3
    got = [([p.fn for p in c.pre], [p.fn for p in c.post], len(c.aux)) for c in cols]
    assert got == [(["mul"], ["add", "mul"], 3), (["tanh", "mul", "add"], [], 1), (["mul"], ["sub"], 2)]


def test_what_stays_outside(agent):
    """A value also read elsewhere, a program output, a tensor operand of a reduction's epilogue (its rows are
    reduced away), a tensor varying along a column kernel's I block (the dims after the reduced one), a broadcast
    of the chain value, and a tensor varying along a window kernel's pooled dim stay in their elementwise kernels;
    a per-channel tensor before a reduction over the channels goes in (a row value)."""
    src = problem(forward="y = x * 2.0; return (torch.softmax(y, dim=1), y, torch.amax(x, dim=1) + self.b, "
                          "torch.mean(x + self.c.view(1, 4, 1), dim=1), torch.tanh(torch.sum(x, dim=0)), "
                          "torch.nn.functional.max_pool1d(x + self.b, 2), torch.amin(x - self.b, dim=1), "
                          "torch.sum(x, dim=1) * self.b)",
                  inputs="[torch.randn(3, 4, 5)]",
                  ctor="self.b = nn.Parameter(torch.randn(5)); self.c = nn.Parameter(torch.randn(4))")
    low = _lowered(agent, src)
    fused = fuse_column_chains(low)
    got = [(c.label, c.lo, [p.fn for p in c.pre], [p.fn for p in c.post], len(c.aux)) for c in fused.items
           if isinstance(c, ColOp)]
    # y is also an output; self.c is one value per channel (the mean's rows); the tanh reads nothing else
    assert got == [("softmax", 1, [], [], 0), ("amax", 1, [], [], 0), ("mean", 1, ["add"], [], 1),
                   ("sum", 0, [], ["tanh"], 0), ("max_pool1d", 2, [], [], 0), ("amin", 1, [], [], 0),
                   ("sum", 1, [], [], 0)], got
    kept = sorted(it.fn for it in fused.items if isinstance(it, Prim) and it.fn in ("mul", "add", "sub"))
    # y; amax + b; max_pool1d's x + b; amin's x - b; sum(dim=1) * b (the second sum keeps its epilogue outside)
    assert kept == ["add", "add", "mul", "mul", "sub"], kept


def test_column_chains_read_row_values(agent):
    """Per-channel (and per-sample, per-position) tensors around column kernels are row values: every elementwise
    op of column_rows goes into its column kernel (one kernel a column op, none of their own), plain has each op in
    a kernel of its own."""
    low = _lowered(agent, CASES["column_rows"])
    plain_k, plain_cols = _kernels(low, fuse=False)
    fused_k, cols = _kernels(low, fuse=True)
    assert len(cols) == len(plain_cols) == 6 and plain_k >= 10 and fused_k == 0, (plain_k, fused_k)
    got = [(c.label, [p.fn for p in c.pre], [p.fn for p in c.post], len(c.aux)) for c in cols]
    assert got == [("sum", ["mul", "add"], ["tanh"], 2), ("softmax", ["add"], ["mul"], 2),
                   ("cumsum", ["mul"], ["sub"], 2), ("cumsum", ["mul"], ["add"], 1), ("amax", ["mul"], [], 1),
                   ("argmax", ["sub"], [], 1)], got


def test_gallery_channel_mean_is_one_kernel(agent):
    """level2/18 (conv, per-channel scale, LeakyReLU, mean over the channels, tanh): after the vendor convolution,
    one column kernel; on the CPU it is judged correct (and so on every writer's static check)."""
    from kforge_core.gallery import get_problem

    src = get_problem("level2/18_conv2d_scale_channel_mean").source
    res = agent.synthesize(src, "cpu", Schedule(fuse=True), "18_conv2d_scale_channel_mean")
    assert "4 in 1 custom kernel;" in res.notes, res.notes
    assert "float kf_c0_pre(float u, float av0)" in res.program and "float kf_c0_post(float u)" in res.program


@pytest.mark.parametrize("sched", [Schedule(fuse=True), BEST], ids=["fuse", "best"])
@pytest.mark.parametrize("case", ["column_chains", "window_chains", "column_rows"])
def test_fused_chains_match_pytorch_on_the_cpu(agent, sched, case):
    src = CASES.get(case) or POOL_CASES[case]
    res = synthesized(agent, src, sched, name=case)
    assert "float kf_c0_pre(float u" in res.program and "float kf_c0_post(float u" in res.program
    judge(src, res.program, case)


@pytest.mark.parametrize("target", ["cuda", "triton"])
def test_gpu_writers_write_column_row_values(agent, target):
    """Statically: the CUDA and Triton column kernels take their row values (tests/gpu judges column_rows on the
    device, and test_builtin_kernelbench writes and compiles it with every move)."""
    res = agent.synthesize(CASES["column_rows"], target, Schedule(fuse=True), "column_rows")
    assert res.program.count("= kf_pool_rows(") == 9 and res.program.count("(column kernel)") == 6


@pytest.mark.parametrize("target", ["cuda", "triton", "metal"])
def test_gpu_writers_write_window_chains(agent, target):
    """Statically: the CUDA and Triton writers write the window kernels' chains with their row values (Metal, with
    no window kernels, the window-view path); tests/gpu judges them on the device."""
    writes_every_case(agent, target, {"window_chains": POOL_CASES["window_chains"]}, column_only=set())
    if target != "metal":
        res = agent.synthesize(POOL_CASES["window_chains"], target, Schedule(fuse=True), "window_chains")
        assert "= kf_pool_rows(" in res.program and res.program.count("= kf_pool_view(") == 3
