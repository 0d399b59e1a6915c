"""Elementwise chains fused into the column and window kernels (synth/plan/col_fusion.py): under the fuse move the
prologue and epilogue around each column or window kernel become part of it (fewer kernels, the same results on
the CPU, run by the real evaluator), only where the graph allows; without the move nothing is fused."""

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
    """A value also read elsewhere, a program output, a tensor operand of a column kernel's chain (a per-channel
    bias), a broadcast of the chain value, and a tensor varying along a window kernel's pooled dim stay in their
    elementwise kernels."""
    src = problem(forward="y = x * 2.0; return (torch.softmax(y, dim=1), y, torch.amax(x, dim=1) + self.b, "
                          "torch.mean(x + self.c.view(1, 4, 1), dim=1), torch.tanh(torch.sum(x, dim=0)), "
                          "torch.nn.functional.max_pool1d(x + self.b, 2))",
                  inputs="[torch.randn(3, 4, 5)]",
                  ctor="self.b = nn.Parameter(torch.randn(5)); self.c = nn.Parameter(torch.randn(4))")
    low = _lowered(agent, src)
    fused = fuse_column_chains(low)
    cols = {c.label: c for c in fused.items if isinstance(c, ColOp)}
    assert not cols["softmax"].pre  # y is also an output
    assert not any(c.pre or c.post or c.aux for lab, c in cols.items() if lab != "sum")
    assert "max_pool1d" in cols
    assert [p.fn for p in cols["sum"].post] == ["tanh"]
    kept = {it.fn for it in fused.items if isinstance(it, Prim)}
    assert {"mul", "add"} <= kept


@pytest.mark.parametrize("sched", [Schedule(fuse=True), BEST], ids=["fuse", "best"])
@pytest.mark.parametrize("case", ["column_chains", "window_chains"])
def test_fused_chains_match_pytorch_on_the_cpu(agent, sched, case):
    src = CASES.get(case) or POOL_CASES[case]
    res = synthesized(agent, src, sched, name=case)
    assert "float kf_c0_pre(float u" in res.program and "float kf_c0_post(float u" in res.program
    judge(src, res.program, case)


@pytest.mark.parametrize("target", ["cuda", "triton", "metal"])
def test_gpu_writers_write_window_chains(agent, target):
    """Statically: the CUDA and Triton writers write the window kernels' chains with their row values (Metal, with
    no window kernels, the window-view path); tests/gpu judges them on the device."""
    writes_every_case(agent, target, {"window_chains": POOL_CASES["window_chains"]}, column_only=set())
    if target != "metal":
        res = agent.synthesize(POOL_CASES["window_chains"], target, Schedule(fuse=True), "window_chains")
        assert "= kf_pool_rows(" in res.program and res.program.count("= kf_pool_view(") == 3
