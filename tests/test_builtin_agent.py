"""The built-in, rule-based generation agent (kforge_core.agents.builtin_generation): its label and the run
factory, the patterns it synthesizes into correct CPU candidates (judged by the real evaluator, small sizes), clear
errors or partial support for modules it cannot synthesize, its result's shape. Moves, the analysis agent, GPU
formats, concatenation and numerics have files of their own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kforge_core.agents.base import GenerationResult
from kforge_core.agents.builtin_analysis import BuiltinAnalysisAgent
from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.agents.factory import build_agents
from kforge_core.synth.schedule import LABEL, Schedule, read_marker
from tests.builtin_fixtures import (  # noqa: F401 - pytest fixtures
    LINEAR_GELU, NORMS, ROWS, _judge, _request, _src, agent)


POINTWISE = _src('''
    """Elementwise chain with broadcasting, Python scalars (forward argument and module attribute) and many ops."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Model(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.bias = nn.Parameter(torch.randn(channels))
            self.scale = 0.5

        def forward(self, x, y, alpha: float):
            h = x * self.scale + y
            h = torch.where(h > 0, h, 0.1 * h)
            h = torch.clamp(h, -1.5, 2.0) + alpha * torch.sigmoid(x)
            h = F.gelu(h, approximate="tanh") - torch.tanh(h).abs() + torch.sqrt(torch.abs(x) + 1.0)
            h = torch.maximum(h, torch.exp(-x * x)) + h.pow(2) * 0.1 + torch.rsqrt(h * h + 1.0)
            h = h - F.silu(h) / (1.0 + torch.log(x.abs() + 1.0)) + F.gelu(-h) + torch.relu(-x) * 0.25
            return h * self.bias.view(1, -1, 1, 1)


    def get_inputs():
        return [torch.randn(3, 8, 5, 16), torch.randn(8, 1, 1), 0.75]


    def get_init_inputs():
        return [8]
''')


CONV_ONLY = _src('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return self.conv(x)


    def get_inputs():
        return [torch.randn(1, 3, 8, 8)]


    def get_init_inputs():
        return []
''')

DATA_DEPENDENT = _src('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return torch.relu(x) * 2.0
            return x - 1.0


    def get_inputs():
        return [torch.randn(4, 4)]


    def get_init_inputs():
        return []
''')


# ------------------------------------------------------------------------------------------------ label / API

def test_labels_say_rule_based_no_llm():
    gen, ana = BuiltinGenerationAgent(), BuiltinAnalysisAgent()
    assert gen.label == ana.label == LABEL == "built-in, rule-based (no LLM)"

    class Config:
        agent = "builtin"
        size_class = "cpu"

    g, a = build_agents(Config())
    assert isinstance(g, BuiltinGenerationAgent) and isinstance(a, BuiltinAnalysisAgent)
    assert g.size_class == "cpu"


def test_the_run_factory_builds_the_builtin_pair():
    factory = pytest.importorskip("kforge_core.agents.factory")
    loop_config = pytest.importorskip("kforge_core.loop.config")
    config = loop_config.RunConfig(problem_source=ROWS, problem_name="rows", target="cpu", agent="builtin",
                                   size_class="cpu")
    gen, ana = factory.build_agents(config)
    assert isinstance(gen, BuiltinGenerationAgent) and isinstance(ana, BuiltinAnalysisAgent)
    assert gen.label == ana.label == LABEL and gen.size_class == "cpu"


# ------------------------------------------------------------------------------------------ supported patterns

@pytest.mark.parametrize("name,source,expect_kernels,expect_text", [
    ("pointwise", POINTWISE, 1, "synthesized"),
    ("rows", ROWS, None, "synthesized"),
    ("norms", NORMS, None, "synthesized"),
    ("linear_gelu", LINEAR_GELU, 1, "matrix product via torch"),
])
def test_pattern_synthesized_and_correct(agent, name, source, expect_kernels, expect_text):
    """The functional candidate (plain) is correct; so is the fully optimized one for the same graph."""
    first = agent.generate(_request(source, name))
    assert first.program, first.error
    assert "100%" in first.notes and expect_text in first.notes, first.notes
    assert "from platforms.cpu import compile_cpp" in first.program
    best = agent.synthesize(source, "cpu", Schedule(fuse=True, parallel=True, vectorize=True, block=True,
                                                    unroll=True), name)
    assert best.program and best.program != first.program
    marker = read_marker(best.program)
    if expect_kernels is not None:
        assert len(marker["kernels"]) == expect_kernels, marker["kernels"]
    assert len(marker["kernels"]) <= len(read_marker(first.program)["kernels"])
    _judge(source, best.program, name)
    if name in ("pointwise", "rows"):  # the plain version too (one kernel per node, scalar, serial)
        _judge(source, first.program, name)


def test_linear_epilogue_runs_in_place_on_the_matmul_result(agent):
    res = agent.synthesize(LINEAR_GELU, "cpu", Schedule(fuse=True), "linear_gelu")
    assert "torch.nn.functional.linear(" in res.program  # the GEMM without its bias: the bias is in the epilogue
    assert "written in place" in res.program
    kernels = read_marker(res.program)["kernels"]
    assert len(kernels) == 1 and "gelu" in kernels[0]["label"] and "bias" in kernels[0]["label"]


# ------------------------------------------------------------------------------------------------ unsupported

def test_conv_only_module_is_refused_with_a_clear_message(agent):
    res = agent.generate(_request(CONV_ONLY, "conv"))
    assert res.program is None
    assert "nothing to synthesize" in res.error and "conv2d" in res.error
    assert res.unsupported and "kept in PyTorch: conv2d" in res.coverage


def test_matmul_only_module_is_refused_with_a_clear_message(agent):
    src = (Path(__file__).parent / "fixtures_loop" / "problem_matmul_only.py").read_text()
    res = agent.generate(_request(src, "mm"))
    assert res.program is None and "matrix products" in res.error and "vendor library" in res.error
    assert res.unsupported and "matrix product via torch" in res.coverage  # the run ends unsupported, not failed


def test_data_dependent_control_flow_is_refused_with_a_clear_message(agent):
    res = agent.generate(_request(DATA_DEPENDENT, "branchy"))
    assert res.program is None
    assert "cannot trace" in res.error and "torch.fx" in res.error and "torch.export" in res.error
    assert res.unsupported  # beyond the tracer: the same answer every time


def test_partial_support_keeps_unsupported_nodes_in_pytorch(agent):
    src = _src('''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3, padding=1)

            def forward(self, x):
                return torch.relu(self.conv(x) * 2.0 + 1.0)


        def get_inputs():
            return [torch.randn(2, 3, 8, 8)]


        def get_init_inputs():
            return []
    ''')
    res = agent.synthesize(src, "cpu", Schedule(fuse=True), "conv_relu")
    assert res.program, res.error
    assert re.search(r"3 of 4 nodes \(75%\) synthesized: 3 in 1 custom kernel; kept in PyTorch: conv2d", res.notes), \
        res.notes
    assert "self.conv(" in res.program
    _judge(src, res.program, "conv_relu")


def test_group_norm_is_a_stats_row_kernel_and_an_elementwise_kernel(agent):
    """GroupNorm (module with and without affine, 4-D and 3-D input, and F.group_norm) lowers to a per-group
    statistics row kernel plus an elementwise kernel that applies it; the SiLU after it fuses into the latter."""
    src = _src('''
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Model(nn.Module):
            def __init__(self, channels):
                super().__init__()
                self.norm = nn.GroupNorm(4, channels, eps=1e-4)
                self.plain = nn.GroupNorm(2, channels, affine=False)
                with torch.no_grad():
                    self.norm.weight.add_(0.3 * torch.randn(channels))
                    self.norm.bias.add_(0.3 * torch.randn(channels))

            def forward(self, x, y):
                a = F.silu(self.norm(x))
                b = F.silu(self.plain(y))
                c = F.group_norm(y * 2.0 + 1.0, 4, self.norm.weight, self.norm.bias)
                return a, b, c


        def get_inputs():
            return [torch.randn(3, 12, 5, 7) * 2.0 + 0.5, torch.randn(2, 12, 33) - 1.0]


        def get_init_inputs():
            return [12]
    ''')
    for sched in (Schedule(), Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True)):
        res = agent.synthesize(src, "cpu", sched, "group_norm_silu")
        assert res.program, res.error
        assert "(100%) synthesized" in res.notes and "kept in PyTorch" not in res.notes, res.notes
        assert "groupnorm" not in res.notes and "group_norm" not in res.notes, res.notes
        assert "F.group_norm" not in res.program and "self.norm(" not in res.program and "self.plain(" not in res.program
        _judge(src, res.program, "group_norm_silu")
    labels = [k["label"] for k in read_marker(res.program)["kernels"]]
    # per norm: one statistics row kernel, one elementwise kernel (with the SiLU where one follows); the y*2+1
    # before F.group_norm stays its own kernel (the grouped view of its result is glue between the kernels)
    assert sorted(labels) == sorted(["group_norm"] * 4 + ["group_norm+silu"] * 2 + ["mul+add"]), labels


def test_generation_result_shape(agent):
    res = agent.generate(_request(ROWS, "rows"))
    assert isinstance(res, GenerationResult) and res.error is None and res.reply_text
    assert res.usage.model == LABEL and res.usage.prompt_tokens == 0
