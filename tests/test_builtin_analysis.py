"""The built-in analysis agent (kforge_core.agents.builtin_analysis): from profile and roofline facts to
catalogue moves, what it skips (applied, tried), programs it did not write, a measured profile fed to it.
"""

from __future__ import annotations

import re

from kforge_core.agents.base import AnalysisRequest
from kforge_core.agents.builtin_analysis import BuiltinAnalysisAgent
from kforge_core.eval.evaluator import EvalOptions, evaluate
from kforge_core.problem import load_problem
from kforge_core.synth.schedule import CATALOGUE, LABEL, MOVE_TITLES, Schedule
from tests.builtin_fixtures import CPU, SOFTMAX_CHAIN, agent  # noqa: F401 - pytest fixtures


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
    # several kernels per forward in the plain first version, exp in them: fuse first, or vectorize first where
    # the measured program is slower than eager and far below its memory floor (the tests above)
    assert first.move in ("fuse", "vectorize"), analysis.text
    assert {"fuse", "vectorize"} <= {r.move for r in analysis.recommendations}
    assert re.search(r"\d", first.why)
    assert analysis.usage.model == LABEL


def test_a_slow_compute_bound_program_with_transcendentals_is_vectorized_before_fused(agent):
    """Slower than eager, several kernels, exp in the inner loops: on a memory-bound problem working near its memory
    floor fusing saves the most (fewer passes over memory); on a compute-bound one, or on the CPU a memory-bound one
    far below its floor, the scalar libm calls are the time, so vectorize comes first."""
    program = _program(agent, Schedule())
    assert "kf_exp" in program
    prof = _profile([("kforge::kf_k0", 0.45, True), ("kforge::kf_k1", 0.45, True), ("aten::empty", 0.1, False)])
    order = {}
    for bound, pct in (("memory", 50.0), ("memory", 7.0), ("compute", 7.0)):
        req = _analysis(program, prof)
        req.roofline = {**ROOF, "bound": bound, "pct_of_roofline": pct}
        req.candidate_ms, req.eager_ms = 4.0, 1.0
        order[bound, pct] = [r.move for r in BuiltinAnalysisAgent().analyze(req).recommendations]
    # (the cores' move may come first on a machine with many cores: only fuse against vectorize is compared)
    assert order["memory", 50.0].index("fuse") < order["memory", 50.0].index("vectorize"), order
    assert order["memory", 7.0].index("vectorize") < order["memory", 7.0].index("fuse"), order
    assert order["compute", 7.0].index("vectorize") < order["compute", 7.0].index("fuse"), order


def test_a_slow_single_transcendental_kernel_far_below_its_floor_is_vectorized_before_parallelized(agent,
                                                                                                    monkeypatch):
    """KernelBench's Softplus / Tanh / Softmax at CPU sizes: one kernel of scalar libm calls at ~1 % of its memory
    floor, several times slower than eager. Two cores halve the time at best; the SIMD polynomial functions take
    most of it off: vectorize is the first move (on 2 cores, as CI's). Near the floor it is not."""
    monkeypatch.setattr("kforge_core.agents.builtin_analysis.os.cpu_count", lambda: 2)
    program = _program(agent, Schedule(fuse=True))
    prof = _profile([("kforge::kf_k0", 0.95, True), ("aten::empty", 0.05, False)])
    moves = {}
    for pct in (1.4, 60.0):
        req = _analysis(program, prof)
        req.roofline = {**ROOF, "bound": "memory", "pct_of_roofline": pct}
        req.candidate_ms, req.eager_ms = 1.7, 0.27
        moves[pct] = [r.move for r in BuiltinAnalysisAgent().analyze(req).recommendations]
    assert moves[1.4][0] == "vectorize", moves
    assert moves[60.0].index("parallelize_rows") < moves[60.0].index("vectorize"), moves


RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(256, 384)]


def get_init_inputs():
    return []
'''


def test_the_math_helpers_every_cpu_program_defines_do_not_make_it_transcendental(agent, monkeypatch):
    """Every built-in CPU program defines kf_exp, kf_tanh... ahead of its kernels; a ReLU calls none of them, so
    far below its floor it is not taken for scalar libm work: on 2 cores the cores' move stays ahead of vectorize
    there, while the same program with an exp in its kernel puts vectorize first."""
    monkeypatch.setattr("kforge_core.agents.builtin_analysis.os.cpu_count", lambda: 2)
    relu = agent.synthesize(RELU, "cpu", Schedule(fuse=True), "relu").program
    assert "kf_exp" in relu  # the helper is there ...
    exp = agent.synthesize(RELU.replace("torch.relu(x)", "torch.exp(x)"), "cpu", Schedule(fuse=True), "exp").program
    prof = _profile([("kforge::kf_k0", 0.95, True), ("aten::empty", 0.05, False)])
    first = {}
    for name, program in (("relu", relu), ("exp", exp)):
        req = AnalysisRequest(program=program, problem_source=RELU, spec=CPU.spec(), profile=prof,
                              roofline={**ROOF, "pct_of_roofline": 1.5}, candidate_ms=1.0, eager_ms=0.2,
                              compiled_ms=None)
        first[name] = BuiltinAnalysisAgent().analyze(req).recommendations[0].move
    assert first == {"relu": "parallelize_rows", "exp": "vectorize"}, first
