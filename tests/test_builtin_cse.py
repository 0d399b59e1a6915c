"""Duplicate primitives merged after lowering (`kforge_core/synth/lower/cse.py`): what is merged, what must stay, and a
module with a repeated reduction judged correct on the CPU target by the real evaluator."""

from __future__ import annotations

import textwrap

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.schedule import Schedule
from kforge_core.synth.lower.cse import merge_duplicates
from kforge_core.synth.lower.graph import lower
from kforge_core.synth.lower.ir import Lowered, Prim, Py, Value
from kforge_core.eval.evaluator import EvalOptions, evaluate
from kforge_core.problem import load_problem

# `x.std` computes the row mean again, then `x - mean` again: both are duplicates of the module's own.
STANDARDIZE = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            centered = x - x.mean(dim=-1, keepdim=True)
            return centered / (x.std(dim=-1, keepdim=True) + 1e-5)


    def get_inputs():
        return [torch.randn(64, 1000) * 3.0 + 2.0]


    def get_init_inputs():
        return []
''')

ROW = (8, 16)


def _prim(name, fn, operands, shape=ROW, red=None, **attrs) -> Prim:
    return Prim(name, fn, operands, shape, "float32", name, attrs, red)


def _lowered(items, outputs) -> Lowered:
    return Lowered(items, {}, [("x", None)], "out", outputs, {}, {}, {}, "fx", [], set(), {})


def _mean(name: str, src: str = "x") -> Prim:
    return _prim(name, "red", [("v", src)], (8, 1), {"op": "mean", "k": 1, "keepdim": True, "in_shape": ROW})


def _names(lowered: Lowered) -> list[str]:
    return [it.name for it in lowered.items]


def test_a_duplicate_goes_and_its_readers_read_the_first_then_chains_collapse():
    low = _lowered([_mean("m1"), _prim("d1", "sub", [("v", "x"), ("v", "m1")]),
                    _mean("m2"), _prim("d2", "sub", [("v", "x"), ("v", "m2")]),
                    _prim("sq", "mul", [("v", "d2"), ("v", "d2")]),
                    _prim("out", "div", [("v", "d1"), ("v", "sq")])], ["out"])
    assert merge_duplicates(low) == 2
    assert _names(low) == ["m1", "d1", "sq", "out"]
    assert low.items[2].operands == [("v", "d1"), ("v", "d1")]  # d2 was x - m2 = x - m1 = d1


def test_what_differs_is_never_merged():
    other_op = _prim("m2", "red", [("v", "x")], (8, 1), {"op": "sum", "k": 1, "keepdim": True, "in_shape": ROW})
    low = _lowered([_mean("m1"), other_op, _prim("a", "leaky_relu", [("v", "x")], slope=0.1),
                    _prim("b", "leaky_relu", [("v", "x")], slope=0.2), _prim("c", "add", [("v", "x"), ("c", 1.0)]),
                    _prim("e", "add", [("v", "x"), ("c", 2.0)])], ["e"])
    assert merge_duplicates(low) == 0 and len(low.items) == 6


def test_names_read_outside_primitive_operands_stay():
    """An output, a PyTorch call's input and a cat piece's root name a value by its variable: never merged away."""
    py = Py("y", "torch.nn.functional.linear(t_m2, w)", ["m2"], Value("t", (8, 1), "float32"), "lib", "y")
    cat = _prim("cat", "cat", [("v", "m3")], (8, 2), pieces=[{"lo": 0, "w": 1, "shape": (8, 1), "root": ("v", "m3"),
                                                                  "prims": []}])
    low = _lowered([_mean("m1"), _mean("m2"), py, _mean("m3"), cat, _mean("m4")], ["m4", "y", "cat"])
    assert merge_duplicates(low) == 0
    assert _names(low) == ["m1", "m2", "y", "m3", "cat", "m4"]


def test_standardize_lowers_to_two_reductions():
    from kforge_core.synth.trace import trace_problem

    low = lower(trace_problem(STANDARDIZE, "cpu", timeout_s=120))
    reds = [it.red["op"] for it in low.items if isinstance(it, Prim) and it.fn == "red"]
    subs = [it for it in low.items if isinstance(it, Prim) and it.fn == "sub"]
    assert reds == ["mean", "sum"] and len(subs) == 1, [(it.name, it.fn) for it in low.items]


@pytest.mark.parametrize("schedule", [Schedule(), Schedule(fuse=True, parallel=True, vectorize=True, block=True,
                                                           unroll=True)], ids=["plain", "optimized"])
def test_standardize_with_a_repeated_mean_is_correct(schedule):
    res = BuiltinGenerationAgent().synthesize(STANDARDIZE, "cpu", schedule, "standardize")
    assert res.program, res.error
    verdict = evaluate(load_problem(text=STANDARDIZE, name="standardize"), res.program, "cpu",
                       EvalOptions(timing=False))
    assert verdict.status == "correct", f"{verdict.status}: {verdict.reason}\n{verdict.compile_log}"
