"""The built-in generator's optimization moves: each gives a different correct program, a move that changes
nothing falls through, one recommendation built per step, conservative variants for failed candidates (CPU
candidates judged by the real evaluator, small sizes).
"""

from __future__ import annotations

from kforge_core.agents.base import Feedback, Recommendation
from kforge_core.synth.schedule import CPU_ORDER, MOVE_TITLES, Schedule, read_marker
from tests.builtin_fixtures import ROWS, SOFTMAX_CHAIN, _judge, _request, _src, agent  # noqa: F401 - pytest fixtures


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


def test_parallel_elementwise_kernels_split_a_long_row_and_stay_correct(agent):
    """A 256 x 256 elementwise tensor is one 65536-element row to the kernel: the parallel loop must cut it into
    several tasks (it was one, so 'parallelize' ran on one thread); sizes around the cuts stay correct."""
    for shape, name in (((1, 70001), "long_row"), ((3, 5), "tiny"), ((300, 999), "many_rows")):
        source = _src(f'''
            import torch
            import torch.nn as nn

            class Model(nn.Module):
                def forward(self, x):
                    return torch.nn.functional.mish(x) * 2.0

            def get_inputs():
                return [torch.randn{shape}]

            def get_init_inputs():
                return []
            ''')
        res = agent.synthesize(source, "cpu", Schedule().with_move("parallelize_rows"), problem_name=name)
        assert res.program, res.error
        assert "omp_get_max_threads()" in res.program and "#pragma omp parallel for" in res.program
        _judge(source, res.program, name)
