"""The built-in, rule-based agents (kforge_core.agents.builtin_generation, builtin_analysis): synthesized CPU candidates judged by the real
evaluator, the optimization moves, the analysis agent's mapping from profile facts to moves, and clear errors for
modules it cannot synthesize. Small sizes; correctness runs use EvalOptions(timing=False); the one timed run has a
tiny budget and asserts only structure, never speed."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from kforge_core.agents.base import (AnalysisRequest, Feedback, GenerationRequest, GenerationResult,
                                     Recommendation)
from kforge_core.agents.builtin_analysis import BuiltinAnalysisAgent
from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.schedule import Schedule
from kforge_core.agents.factory import build_agents
from kforge_core.synth.schedule import CATALOGUE, CPU_ORDER, LABEL, MOVE_TITLES, read_marker
from kforge_core.eval.evaluator import EvalOptions, evaluate
from kforge_core.platform import get_platform
from kforge_core.problem import load_problem
from kforge_core.eval.rules import check_candidate

CPU = get_platform("cpu")
if not CPU.availability().ok:  # pragma: no cover - CI has g++
    pytest.skip("no C++ compiler", allow_module_level=True)


def _src(body: str) -> str:
    return textwrap.dedent(body).strip() + "\n"


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

ROWS = _src('''
    """Softmax, log_softmax and sum / mean / max reductions over the last dimension."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            a = torch.softmax(x * 2.0, dim=-1)
            b = torch.log_softmax(x, dim=-1)
            s = x.sum(dim=-1, keepdim=True)
            m = x.mean(-1)
            mx = torch.amax(x, dim=-1)
            v = torch.max(x, dim=-1).values
            return a + b + s / 100.0, m + mx - v


    def get_inputs():
        return [torch.randn(6, 9, 300)]


    def get_init_inputs():
        return []
''')

NORMS = _src('''
    """LayerNorm (module) of a residual sum, then RMSNorm written out as x * rsqrt(mean(x^2) + eps) * w."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, hidden, eps):
            super().__init__()
            self.norm = nn.LayerNorm(hidden)
            with torch.no_grad():
                self.norm.weight.add_(0.1 * torch.randn(hidden))
                self.norm.bias.add_(0.1 * torch.randn(hidden))
            self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
            self.eps = eps

        def forward(self, x, residual):
            h = self.norm(x + residual)
            return h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


    def get_inputs():
        return [torch.randn(4, 33, 96), torch.randn(4, 33, 96)]


    def get_init_inputs():
        return [96, 1e-6]
''')

LINEAR_GELU = _src('''
    """Linear with bias then GELU: the matmul stays in the vendor library, bias + GELU is one epilogue kernel."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Model(nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.fc = nn.Linear(n_in, n_out)

        def forward(self, x):
            return F.gelu(self.fc(x))


    def get_inputs():
        return [torch.randn(64, 48)]


    def get_init_inputs():
        return [48, 80]
''')

SOFTMAX_CHAIN = _src('''
    """Scaled, biased softmax followed by a SiLU gate: elementwise and row work the moves can change."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Model(nn.Module):
        def __init__(self, cols):
            super().__init__()
            self.bias = nn.Parameter(0.1 * torch.randn(cols))

        def forward(self, x, gate):
            p = torch.softmax(x * 0.5 + self.bias, dim=-1)
            return p * F.silu(gate) + torch.tanh(gate) * 0.01


    def get_inputs():
        return [torch.randn(37, 257), torch.randn(37, 257)]


    def get_init_inputs():
        return [257]
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

FAST = EvalOptions(timing=False)


@pytest.fixture(scope="module")
def agent() -> BuiltinGenerationAgent:
    return BuiltinGenerationAgent()


def _request(source: str, name: str, pass_name: str = "functional", previous: str | None = None,
             feedback: Feedback | None = None, iteration: int = 0) -> GenerationRequest:
    return GenerationRequest(problem_source=source, problem_name=name, spec=CPU.spec(), pass_name=pass_name,
                             iteration=iteration, previous_program=previous, feedback=feedback)


def _judge(source: str, program: str, name: str = "p"):
    assert not check_candidate(program, CPU.module_name, CPU.candidate_api), "static rules reject the candidate"
    verdict = evaluate(load_problem(text=source, name=name), program, "cpu", FAST)
    assert verdict.status == "correct", f"{verdict.status}: {verdict.reason}\n{verdict.compile_log}\n{verdict.log_tail}"
    assert sum(verdict.kernel_launches.values()) > 0
    return verdict


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


# ------------------------------------------------------------------------------------------------ moves

def test_each_move_gives_a_different_correct_program(agent):
    """The optimization pass as the loop drives it: previous program + recommended move -> a new program."""
    current = agent.generate(_request(SOFTMAX_CHAIN, "softmax_chain"))
    assert current.program, current.error
    programs = [current.program]
    _judge(SOFTMAX_CHAIN, current.program, "softmax_chain")
    for i, move in enumerate(CPU_ORDER, 1):
        rec = Recommendation(title=MOVE_TITLES[move], change="", why="test", move=move)
        fb = Feedback(status="correct", reason="ok", recommendations=[rec])
        nxt = agent.generate(_request(SOFTMAX_CHAIN, "softmax_chain", "optimization", current.program, fb, i))
        assert nxt.program, nxt.error
        assert nxt.program not in programs, f"move {move} did not change the program"
        assert read_marker(nxt.program)["schedule"] == Schedule.from_dict(
            read_marker(current.program)["schedule"]).with_move(move).to_dict()
        assert f"move {move!r}" in nxt.notes
        _judge(SOFTMAX_CHAIN, nxt.program, "softmax_chain")
        programs.append(nxt.program)
        current = nxt
    src = programs[-1]
    assert "#pragma omp parallel" in src and "#pragma omp simd" in src and "kf_cache" in src
    assert "simdlen(16)" in src and "-funroll-loops" in src
    # every move applied: nothing left, said clearly instead of repeating a program
    fb = Feedback(status="correct", reason="ok", recommendations=[Recommendation("x", "", "", move="vectorize")])
    done = agent.generate(_request(SOFTMAX_CHAIN, "softmax_chain", "optimization", current.program, fb, 9))
    assert done.program is None and "nothing left to try" in done.error and "vectorize" in done.error


def test_recommended_move_that_changes_nothing_falls_through(agent):
    """`fuse` on a single-node problem changes nothing: the next *recommended* move is built instead, and the
    result names both as built (so neither comes back); a move nobody recommended is never built."""
    single = _src('''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def forward(self, x):
                return torch.sigmoid(x)


        def get_inputs():
            return [torch.randn(8, 8)]


        def get_init_inputs():
            return []
    ''')
    first = agent.generate(_request(single, "sig"))
    recs = [Recommendation("f", "", "", move="fuse"), Recommendation("v", "", "", move="vectorize")]
    nxt = agent.generate(_request(single, "sig", "optimization", first.program,
                                  Feedback(status="correct", reason="ok", recommendations=recs), 1))
    sched = read_marker(nxt.program)["schedule"]
    assert sched["fuse"] and sched["vectorize"] and not sched["parallel"], sched
    assert nxt.moves == ["fuse", "vectorize"]
    assert "fuse built but changed nothing" in nxt.notes
    only_fuse = agent.generate(_request(single, "sig", "optimization", first.program, Feedback(
        status="correct", reason="ok", recommendations=recs[:1]), 2))
    assert only_fuse.program is None and only_fuse.moves == ["fuse"]
    assert "built with no change: fuse" in only_fuse.error and "nothing left to try" in only_fuse.error


def test_optimization_builds_only_the_first_recommendation_and_names_it(agent):
    """Five recommendations, one candidate: the result says it was built with the first only, so the loop records
    the other four as not tried (issue 23: they were stored as tried and never built)."""
    first = agent.generate(_request(SOFTMAX_CHAIN, "softmax_chain"))
    recs = [Recommendation(MOVE_TITLES[m], "", "", move=m) for m in CPU_ORDER]
    nxt = agent.generate(_request(SOFTMAX_CHAIN, "softmax_chain", "optimization", first.program,
                                  Feedback(status="correct", reason="ok", recommendations=recs), 1))
    assert nxt.program and nxt.moves == [CPU_ORDER[0]]
    none = agent.generate(_request(SOFTMAX_CHAIN, "softmax_chain", "optimization", first.program,
                                   Feedback(status="correct", reason="ok", recommendations=[]), 2))
    assert none.program is None and "recommended no move" in none.error
    assert agent.deterministic is True


def test_failed_functional_candidate_gets_a_conservative_variant(agent):
    first = agent.generate(_request(ROWS, "rows"))
    fb = Feedback(status="runtime_error", reason="boom")
    second = agent.generate(_request(ROWS, "rows", "functional", first.program, fb, 1))
    assert second.program and read_marker(second.program)["schedule"]["conservative"]
    assert "kept in PyTorch" in second.notes  # reductions stay in PyTorch in this variant
    third = agent.generate(_request(ROWS, "rows", "functional", second.program, fb, 2))
    assert third.program is None and "no other variant" in third.error
    assert not third.unsupported  # it wrote programs for this problem: a failure with its reason, not its reach


def test_a_reduction_alone_has_no_conservative_variant_and_is_not_called_unsupported(agent):
    src = _src('''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def forward(self, x):
                return torch.sum(x, dim=-1)


        def get_inputs():
            return [torch.randn(16, 64)]


        def get_init_inputs():
            return []
    ''')
    first = agent.generate(_request(src, "row_sum"))
    assert first.program and not first.unsupported and "1 custom kernel" in first.coverage
    second = agent.generate(_request(src, "row_sum", "functional", first.program,
                                     Feedback(status="incorrect", reason="values differ"), 1))
    assert second.program is None and not second.unsupported
    assert "candidate failed (incorrect: values differ)" in second.error and "no program either" in second.error


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


# ------------------------------------------------------------------------------------------------ analysis

def _program(agent, sched: Schedule) -> str:
    return agent.synthesize(SOFTMAX_CHAIN, "cpu", sched, "softmax_chain").program


def _profile(kernels: list[tuple[str, float, bool]], per_forward_ms: float = 2.0) -> dict:
    rows = [{"name": n, "calls_per_forward": 1.0, "ms_per_forward": share * per_forward_ms, "share": share,
             "custom": custom} for n, share, custom in kernels]
    custom_share = sum(r["share"] for r in rows if r["custom"])
    return {"tool": "test", "device": "cpu", "per_forward_ms": per_forward_ms, "kernels": rows,
            "custom_share": custom_share, "launches_per_forward": float(sum(1 for r in rows if r["custom"])),
            "notes": []}


ROOF = {"bytes": 8e6, "flops": 1e6, "bandwidth_gbs": 10.0, "fp32_tflops": 0.1, "memory_floor_ms": 0.8,
        "compute_floor_ms": 0.01, "floor_ms": 0.8, "bound": "memory", "pct_of_roofline": 40.0}


def _analysis(program: str, profile: dict | None, history=()) -> AnalysisRequest:
    return AnalysisRequest(program=program, problem_source=SOFTMAX_CHAIN, spec=CPU.spec(),
                           profile=profile, roofline=dict(ROOF), candidate_ms=2.0, eager_ms=3.0, compiled_ms=1.5,
                           history=list(history))


def test_analysis_recommends_fuse_for_several_kernels(agent):
    program = _program(agent, Schedule())
    prof = _profile([("kforge::kf_k0", 0.3, True), ("kforge::kf_k1", 0.3, True), ("kforge::kf_k2", 0.2, True),
                     ("aten::empty", 0.2, False)])
    res = BuiltinAnalysisAgent().analyze(_analysis(program, prof))
    assert res.recommendations and res.recommendations[0].move == "fuse"
    why = res.recommendations[0].why
    assert "3 custom kernel launches per forward" in why and "40% of the memory floor" in why
    assert all(r.move in CATALOGUE for r in res.recommendations)
    assert all(r.why and r.title == MOVE_TITLES[r.move] for r in res.recommendations)


def test_analysis_recommends_parallel_then_vectorize_and_skips_applied_and_tried(agent):
    ana = BuiltinAnalysisAgent()
    fused = _program(agent, Schedule(fuse=True))
    prof = _profile([("kforge::kf_k0", 0.9, True), ("aten::empty", 0.1, False)])
    res = ana.analyze(_analysis(fused, prof))
    assert res.recommendations[0].move == "parallelize_rows"
    assert "90%" in res.recommendations[0].why and "one thread" in res.recommendations[0].why
    assert "fuse" not in [r.move for r in res.recommendations]  # already applied (schedule marker)
    history = [{"iteration": 3, "tried": MOVE_TITLES["parallelize_rows"], "outcome": "correct, not faster",
                "status": "correct", "candidate_ms": 2.1}]
    res2 = ana.analyze(_analysis(fused, prof, history))
    assert res2.recommendations[0].move == "vectorize"  # tried moves are not recommended again
    assert "parallelize_rows" not in [r.move for r in res2.recommendations]


def test_analysis_has_nothing_left_when_the_catalogue_is_exhausted(agent):
    program = _program(agent, Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True))
    res = BuiltinAnalysisAgent().analyze(_analysis(program, _profile([("kforge::kf_k0", 1.0, True)])))
    assert res.recommendations == [] and "exhausted" in res.text


def test_analysis_reads_programs_it_did_not_write():
    """An LLM-written OpenMP + SIMD kernel: no marker; the source shows what is already done."""
    foreign = 'SOURCE = r"""\nextern "C" void k(const float* x, float* o, int64_t n) {\n' \
              '#pragma omp parallel for simd\nfor (int64_t i = 0; i < n; ++i) o[i] = std::exp(x[i]);\n}\n"""\n'
    res = BuiltinAnalysisAgent().analyze(_analysis(foreign, _profile([("kforge::k", 0.95, True)]), []))
    moves = [r.move for r in res.recommendations]
    assert "parallelize_rows" not in moves and "vectorize" not in moves and "fuse" not in moves
    assert moves and moves[0] == "block_shape"
    none = BuiltinAnalysisAgent().analyze(_analysis(foreign, None))  # no profile at all: still a recommendation
    assert none.recommendations


def test_measured_profile_feeds_the_analysis(agent):
    """One real timed + profiled evaluation (tiny budget, no baselines); only structure is asserted."""
    res = agent.synthesize(SOFTMAX_CHAIN, "cpu", Schedule(), "softmax_chain")
    opts = EvalOptions(timing=True, baselines=False, profile=True,
                       timing_options={"min_trials": 3, "max_trials": 5, "budget_s": 0.2})
    verdict = evaluate(load_problem(text=SOFTMAX_CHAIN, name="softmax_chain"), res.program, "cpu", opts)
    assert verdict.status == "correct", verdict.reason
    assert verdict.profile and verdict.profile.get("kernels"), verdict.profile
    # a CPU profile times the host: no device-time share of the floor is made from it
    assert "device_ms" not in verdict.roofline and "pct_of_roofline_device" not in verdict.roofline
    analysis = BuiltinAnalysisAgent().analyze(AnalysisRequest(
        program=res.program, problem_source=SOFTMAX_CHAIN, spec=CPU.spec(),
        profile=verdict.profile, roofline=verdict.roofline, candidate_ms=verdict.candidate_ms,
        eager_ms=verdict.eager_ms, compiled_ms=None))
    assert analysis.recommendations, analysis.text
    first = analysis.recommendations[0]
    assert first.move == "fuse"  # several kernels per forward in the plain first version
    assert re.search(r"\d", first.why)
    assert analysis.usage.model == LABEL


def test_generation_result_shape(agent):
    res = agent.generate(_request(ROWS, "rows"))
    assert isinstance(res, GenerationResult) and res.error is None and res.reply_text
    assert res.usage.model == LABEL and res.usage.prompt_tokens == 0


# ---------------------------------------------------------------------------------------- vectorized math

def test_vectorized_math_matches_torch_over_wide_ranges():
    """The inline exp/log/tanh/erf the `vectorize` move uses, against torch, far beyond randn's range."""
    import torch

    from kforge_core.synth.backends.cpu import COMMON_MATH, VECTOR_MATH
    from platforms.cpu import compile_cpp

    funcs = {"exp": "kf_exp", "log": "kf_log", "tanh": "kf_tanh", "erf": "kf_erf", "log1p": "kf_log1p",
             "expm1": "kf_expm1"}
    src = "#include <cmath>\n#include <cstdint>\n#include <cstring>\n" + VECTOR_MATH + COMMON_MATH
    for name, fn in funcs.items():
        src += (f'extern "C" void t_{name}(const float* x, float* o, int64_t n) {{\n#pragma omp simd\n'
                f"for (int64_t i = 0; i < n; ++i) o[i] = {fn}(x[i]);\n}}\n")
    lib = compile_cpp(src, extra_cflags=("-fno-math-errno",))
    wide = torch.cat([torch.linspace(-110.0, 110.0, 400_001), torch.randn(100_000) * 3,
                      torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 88.0, 88.7, 89.0, -87.0, -104.0,
                                    float("inf"), float("-inf")])])
    positive = torch.cat([torch.logspace(-37, 38, 200_001), torch.rand(10_000) * 2, torch.tensor([float("inf")])])
    cases = {"exp": wide, "tanh": wide, "erf": wide, "log": positive, "log1p": wide.clamp(min=-0.999),
             "expm1": wide.clamp(max=80)}
    for name, x in cases.items():
        x = x.contiguous()
        out = torch.empty_like(x)
        getattr(lib, f"t_{name}")(x, out, x.numel())
        want = getattr(torch, name)(x.double()).float()
        finite = torch.isfinite(want)
        assert torch.equal(torch.isfinite(out), finite) or name == "exp", name
        err = (out[finite].double() - want[finite].double()).abs()
        tol = 2e-7 + 2e-6 * want[finite].double().abs()  # a few ulp, and 2e-7 absolute near zero
        worst = int(torch.argmax(err - tol))
        assert bool((err <= tol).all()), f"{name}: x={float(x[finite][worst])} got {float(out[finite][worst])} " \
                                         f"want {float(want[finite][worst])}"
        if name == "exp":  # overflow / underflow ends: inf stays inf, tiny results are within 1e-37 of 0
            assert torch.isinf(out[torch.isinf(want)]).all()


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


# ------------------------------------------------------------------------------- cat along the last dimension

ROPE = _src('''
    """Rotary embedding, rotate-half form: the cat of -x2 and x1 fuses into the consuming kernel."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x, cos, sin):
            h = x.size(-1) // 2
            return x * cos + torch.cat([-x[..., h:], x[..., :h]], dim=-1) * sin


    def get_inputs():
        return [torch.randn(2, 3, 5, 16), torch.randn(5, 16), torch.randn(5, 16)]


    def get_init_inputs():
        return []
''')

CAT_SLICES = _src('''
    """A cat of expressions over two tensors' last-dim slices, widths 3 and 6 (no float4 path)."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, a, b, c):
            y = torch.cat((a[..., 1:4] * 2.0, torch.tanh(b[..., 2:8]) - 1.0), dim=-1)
            return torch.relu(y + c)


    def get_inputs():
        return [torch.randn(4, 7, 9), torch.randn(4, 7, 11), torch.randn(9)]


    def get_init_inputs():
        return []
''')

CAT_DIM1 = _src('''
    """A cat along a non-last dimension stays in PyTorch."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, a, b):
            return torch.sigmoid(torch.cat((a * 2.0, b), dim=1)) + 1.0


    def get_inputs():
        return [torch.randn(3, 4, 6), torch.randn(3, 5, 6)]


    def get_init_inputs():
        return []
''')


@pytest.mark.parametrize("name,source", [("rope", ROPE), ("cat_slices", CAT_SLICES)])
def test_last_dim_cat_fuses_into_one_kernel(agent, name, source):
    full = Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True)
    for sched in (Schedule(fuse=True), full):
        res = agent.synthesize(source, "cpu", sched, name)
        assert res.program, res.error
        assert "(100%)" in res.notes and "kept in PyTorch" not in res.notes, res.notes
        assert len(read_marker(res.program)["kernels"]) == 1
        assert "torch.cat" not in res.program
        _judge(source, res.program, name)
    plain = agent.synthesize(source, "cpu", Schedule(), name)  # one kernel per node: the cat is its own kernel
    assert plain.program and "(100%)" in plain.notes
    _judge(source, plain.program, name)


def test_cat_along_another_dim_or_on_triton_stays_in_pytorch(agent):
    res = agent.synthesize(CAT_DIM1, "cpu", Schedule(fuse=True), "cat_dim1")
    assert res.program and "kept in PyTorch: cat" in res.notes, res.notes
    assert "torch.cat(" in res.program
    _judge(CAT_DIM1, res.program, "cat_dim1")
    gpu_agent = BuiltinGenerationAgent(size_class="cpu")
    gpu_agent._traces = agent._traces
    tri = gpu_agent.synthesize(ROPE, "triton", Schedule(fuse=True), "rope")
    assert tri.program and "kept in PyTorch: cat" in tri.notes, tri.notes
    cuda = gpu_agent.synthesize(ROPE, "cuda", Schedule(fuse=True), "rope")
    assert cuda.program and "(100%)" in cuda.notes and len(read_marker(cuda.program)["kernels"]) == 1


# ------------------------------------------------------------------------------------ bf16 / fp16 in kernels

ADD_RMSNORM_BF16 = _src('''
    """bf16 residual add, RMSNorm in fp32, cast back to bf16, times a bf16 weight (LLM decoder style)."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, hidden, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(hidden)).to(torch.bfloat16))

        def forward(self, x, residual):
            h = (x + residual).float()
            h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
            return h.to(torch.bfloat16) * self.weight


    def get_inputs():
        return [torch.randn(4, 33, 200, dtype=torch.bfloat16), torch.randn(4, 33, 200, dtype=torch.bfloat16)]


    def get_init_inputs():
        return [200, 1e-6]
''')


def _half_chain(dtype: str) -> str:
    return _src(f'''
        """A {dtype} elementwise chain: silu(x) * y + 1, a float32 detour and casts back."""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Model(nn.Module):
            def forward(self, x, y):
                h = F.silu(x) * y + 1
                g = (h.float() * 0.1 - y.type(torch.float32)).{ {"bfloat16": "bfloat16", "float16": "half"}[dtype] }()
                return torch.maximum(h, g) - 0.3, (g > 0.2).to(torch.{dtype}) / 3


        def get_inputs():
            return [(torch.randn(3, 41, 300) * 3).to(torch.{dtype}), torch.randn(3, 41, 300).to(torch.{dtype})]


        def get_init_inputs():
            return []
    ''')


def _run_in_process(source: str, program: str, seed: int = 0):
    """The problem's Model and the candidate's ModelNew (same state) on the same inputs: (reference, candidate)."""
    import torch

    prob, cand = {"__name__": "kf_problem"}, {"__name__": "kf_candidate"}
    exec(compile(source, "problem", "exec"), prob)  # noqa: S102 - test-owned sources
    exec(compile(program, "candidate", "exec"), cand)  # noqa: S102
    torch.manual_seed(seed)
    model = prob["Model"](*prob["get_init_inputs"]())
    new = cand["ModelNew"](*prob["get_init_inputs"]())
    new.load_state_dict(model.state_dict())
    inputs = prob["get_inputs"]()
    with torch.no_grad():
        want, got = model(*inputs), new(*inputs)
    return (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))


FULL_CPU = Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True)


def test_bf16_add_rmsnorm_is_one_kernel_and_correct(agent):
    """Loads widen bf16 to float, the add rounds to bf16, `.float()` is exact, `.to(bf16)` and the weight product
    round: the whole module is one row kernel writing bf16."""
    for sched in (FULL_CPU, Schedule()):
        res = agent.synthesize(ADD_RMSNORM_BF16, "cpu", sched, "add_rmsnorm_bf16")
        assert res.program, res.error
        assert "9 of 9 nodes (100%) synthesized" in res.notes and "kept in PyTorch" not in res.notes, res.notes
        kernels = read_marker(res.program)["kernels"]
        assert len(kernels) == (1 if sched.fuse else 9), kernels
        assert "uint16_t" in res.program and "kf_st_bf16" in res.program
        _judge(ADD_RMSNORM_BF16, res.program, "add_rmsnorm_bf16")
        want, got = _run_in_process(ADD_RMSNORM_BF16, res.program)
        assert got[0].dtype == want[0].dtype == __import__("torch").bfloat16
        assert (got[0].float() - want[0].float()).abs().max().item() <= 2 ** -5  # a bf16 ulp at most


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_elementwise_chain_is_bit_exact(agent, dtype):
    """Each half-precision op computes in float and rounds once (Python numbers in add/sub/compare rounded to the
    tensor dtype first, in mul/div kept in float), exactly as PyTorch eager does, under both schedules."""
    import torch

    source = _half_chain(dtype)
    for sched in (Schedule(), FULL_CPU):
        res = agent.synthesize(source, "cpu", sched, f"chain_{dtype}")
        assert res.program, res.error
        assert "(100%) synthesized" in res.notes and "kept in PyTorch" not in res.notes, res.notes
        _judge(source, res.program, f"chain_{dtype}")
        want, got = _run_in_process(source, res.program)
        for w, g in zip(want, got):
            assert g.dtype == w.dtype == getattr(torch, dtype)
            diff = int((w.float() != g.float()).sum())
            assert torch.equal(w, g), f"{diff} of {w.numel()} elements differ"


def test_half_conversions_match_torch_exhaustively():
    """The bit-level bf16/fp16 conversions: every 16-bit pattern widens as torch does, and floats (random, ties,
    overflow, subnormal, inf, NaN) round to nearest even as torch's .to() does."""
    import torch

    from kforge_core.synth.backends.cpu import HALF_BITS
    from kforge_core.synth.backends.cexprs import HALF_MATH
    from platforms.cpu import compile_cpp

    src = "#include <cstdint>\n#include <cstring>\n" + HALF_BITS + HALF_MATH.replace("KF_HALF_FN", "static inline")
    for t in ("bf16", "f16"):
        src += (f'extern "C" void ld_{t}(const uint16_t* h, float* o, int64_t n) {{\n#pragma omp simd\n'
                f"for (int64_t i = 0; i < n; ++i) o[i] = kf_ld_{t}(h[i]);\n}}\n"
                f'extern "C" void st_{t}(const float* x, uint16_t* o, float* r, int64_t n) {{\n#pragma omp simd\n'
                f"for (int64_t i = 0; i < n; ++i) {{ o[i] = kf_st_{t}(x[i]); r[i] = kf_r{t}(x[i]); }}\n}}\n")
    lib = compile_cpp(src, extra_cflags=("-fno-math-errno", "-fno-trapping-math"))
    bits = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    x = torch.cat([torch.randn(200_000) * 10, torch.randn(50_000) * 1e-5, torch.randn(50_000) * 6e4,
                   torch.randn(20_000) * 1e38, torch.logspace(-45, 38, 100_000),
                   (torch.arange(1 << 16, dtype=torch.int32) << 16 | 0x8000).view(torch.float32),  # bf16 ties
                   torch.tensor([0.0, -0.0, 65504.0, 65519.0, 65520.0, 1e-8, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26,
                                 float("inf"), float("-inf"), float("nan")])])
    x = torch.cat([x, -x]).contiguous()
    for t, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        out = torch.empty(1 << 16, dtype=torch.float32)
        getattr(lib, f"ld_{t}")(bits, out, bits.numel())
        want = bits.view(dt).float()
        assert torch.equal(out.isnan(), want.isnan()) and torch.equal(out[~want.isnan()], want[~want.isnan()]), t
        o, r = torch.empty(x.numel(), dtype=torch.int16), torch.empty_like(x)
        getattr(lib, f"st_{t}")(x, o, r, x.numel())
        want = x.to(dt)
        nan = want.isnan()
        assert torch.equal(o.view(dt).isnan(), nan) and torch.equal(r.isnan(), nan), t
        assert torch.equal(o[~nan], want.view(torch.int16)[~nan]), t
        assert torch.equal(r[~nan], want.float()[~nan]), t


def test_half_precision_stays_in_pytorch_where_the_writer_lacks_it(agent):
    """Triton and Metal declare no half dtypes: bf16 nodes stay PyTorch calls with a reason, as before."""
    for target in ("triton", "metal"):
        res = agent.synthesize(ADD_RMSNORM_BF16, target, Schedule(fuse=True), "add_rmsnorm_bf16")
        assert res.program, res.error
        assert "kept in PyTorch: add, float, to, mul" in res.notes, res.notes
        reasons = agent.last_report["kept_reasons"]
        assert reasons["add"] == "output dtype bfloat16 (this target's kernels write float32 and bool)", reasons
        assert "kernels hold float32 only" in reasons["to"], reasons
