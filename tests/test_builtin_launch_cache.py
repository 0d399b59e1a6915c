"""The built-in candidates' launch set-up cache (emit.cached_launch): the Python that checks shapes, prepares
operands and sizes the launch runs once per operand layout, and later calls of that layout only allocate outputs and
launch. Checked in-process on CPU candidates (g++): every call stays correct when values change under a cached
layout, when the layout changes (a new entry), when an operand needs a copy (never cached) and when a strided
operand is passed as a flat view of its memory (cached and replayed)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.schedule import Schedule
from kforge_core.platform import get_platform

if not get_platform("cpu").availability().ok:  # pragma: no cover - CI has g++
    pytest.skip("no C++ compiler", allow_module_level=True)

FULL = Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True)

SWISH_BIAS = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.bias = nn.Parameter(torch.randn(n))

        def forward(self, x):
            return torch.clamp(x * torch.sigmoid(x) + self.bias, -0.5, 1.5)


    def get_inputs():
        return [torch.randn(16, 32)]


    def get_init_inputs():
        return [32]
''')

ROPE = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x, cos, sin):
            half = x.shape[-1] // 2
            rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
            return x * cos + rotated * sin


    def get_inputs():
        return [torch.randn(2, 3, 8, 16), torch.randn(8, 16), torch.randn(8, 16)]


    def get_init_inputs():
        return []
''')


def _models(source: str, name: str):
    res = BuiltinGenerationAgent().synthesize(source, "cpu", FULL, name)
    assert res.program, res.error
    assert "kf_plans" in res.program and "kf_layout" in res.program
    prob, cand = {"__name__": "kf_problem"}, {"__name__": "kf_candidate"}
    exec(compile(source, "problem", "exec"), prob)  # noqa: S102 - test-owned sources
    exec(compile(res.program, "candidate", "exec"), cand)  # noqa: S102 - written by our synthesizer
    torch.manual_seed(0)
    model = prob["Model"](*prob["get_init_inputs"]())
    new = cand["ModelNew"](*prob["get_init_inputs"]())
    new.load_state_dict(model.state_dict())
    return model, new


def _same(model, new, *inputs):
    with torch.no_grad():
        want, got = model(*inputs), new(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_cached_layout_recomputes_every_call_and_copies_are_never_cached():
    model, new = _models(SWISH_BIAS, "swish_bias")
    for seed in range(3):  # the same layout: one entry, fresh values each call
        torch.manual_seed(seed)
        _same(model, new, torch.randn(16, 32))
    assert len(new.kf_plans) == 1
    (entry,) = new.kf_plans.values()
    assert entry[0] is True  # every operand passed through as it is

    wide = torch.randn(32, 16).t()  # same shape, other strides: kf_prep copies it to dense rows
    _same(model, new, wide)
    assert len(new.kf_plans) == 1, "a layout whose operand is copied must not be cached"
    _same(model, new, torch.randn(5, 32))  # another shape: its own entry
    assert len(new.kf_plans) == 2
    _same(model, new, torch.randn(16, 32))  # back to the first layout: served from the cache, still right
    _same(model, new, torch.randn(32, 16).t())


def test_strided_operands_are_replayed_as_flat_views():
    model, new = _models(ROPE, "rope")
    for seed in range(3):
        torch.manual_seed(seed)
        _same(model, new, torch.randn(2, 3, 8, 16), torch.randn(8, 16), torch.randn(8, 16))
    (entry,) = new.kf_plans.values()
    views = entry[0]
    assert views is not True and 0 in views and any(views), views  # the x halves are views, x itself is not
    torch.manual_seed(5)
    x = torch.randn(2, 3, 8, 16)
    _same(model, new, x, torch.randn(8, 16), torch.randn(8, 16))
    _same(model, new, x[:, :, :4], torch.randn(4, 16), torch.randn(4, 16))  # x not dense: copied, not cached
    assert len(new.kf_plans) == 1
    _same(model, new, x[:, :, :4].contiguous(), torch.randn(4, 16), torch.randn(4, 16))  # a shorter sequence
    assert len(new.kf_plans) == 2
