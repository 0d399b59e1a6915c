"""The built-in agents driven by the real loop over several optimization steps (issue 23: the optimization pass
stopped after one move, and the record claimed that all five recommended moves had been tried).

Every recommended move must become a real candidate in turn, the history must name only the moves that were built,
and once nothing is left the run must stop with that reason at once (not burn its budget, not blame patience).
The first test uses the real evaluator and run store on the CPU target (tiny problem, short timing, no
torch.compile baseline); the others a scripted evaluator, for the loop's logic on slower and failed candidates."""

from __future__ import annotations

from pathlib import Path

import pytest

from kforge_core.agents.factory import build_agents
from kforge_core.eval.verdict import Timing, Verdict
from kforge_core.loop import RunConfig, Synthesis, create_run, execute_run, summarize_run
from kforge_core.platform import get_platform
from kforge_core.store import open_store
from kforge_core.synth.schedule import read_marker

if not get_platform("cpu").availability().ok:  # pragma: no cover - CI has g++
    pytest.skip("no C++ compiler", allow_module_level=True)

# The loop tests' tiny ReLU problem as a sigmoid: one elementwise node, so `fuse` has nothing to merge.
SIGMOID = (Path(__file__).parent / "fixtures_loop" / "problem_relu.py").read_text().replace("torch.relu(",
                                                                                     "torch.sigmoid(")
FAST_TIMING = {"min_trials": 3, "max_trials": 5, "budget_s": 0.2}


def config(**kw) -> RunConfig:
    values = dict(problem_source=SIGMOID, problem_name="sigmoid", target="cpu", agent="builtin",
                  max_functional_iters=2, max_optimization_iters=12, patience=0, eval_baselines=False,
                  eval_timing_options=FAST_TIMING)
    values.update(kw)
    return RunConfig(**values)


def moves_of(code: str | None) -> set[str]:
    schedule = (read_marker(code) or {}).get("schedule") or {}
    flags = {"fuse": "fuse", "parallel": "parallelize_rows", "vectorize": "vectorize", "block": "block_shape",
             "unroll": "unroll", "warp_reduce": "warp_reduce"}
    return {move for flag, move in flags.items() if schedule.get(flag)}


def test_every_recommended_move_is_built_in_turn_end_to_end(tmp_path):
    db = tmp_path / "runs.db"
    cfg = config()
    with open_store(db) as store:
        run_id = create_run(store, cfg)
    seen: list = []
    execute_run(db, run_id, cfg, on_event=seen.append)
    with open_store(db) as store:
        summary = summarize_run(store, run_id)
        rows = store.iterations(run_id)
    optimization = [r for r in rows if r["pass"] == "optimization"]
    built = [r for r in optimization if r["code"]]
    # CPU recommendations for one elementwise kernel: parallelize_rows, vectorize, block_shape, unroll; each one
    # becomes a real, judged candidate (whether or not it was faster on this busy machine)
    assert len(built) >= 4, [(r["index"], r["status"], r["reason"]) for r in optimization]
    assert all(r["status"] == "correct" for r in built), [(r["index"], r["reason"]) for r in built]
    new_moves = []
    for row in built:
        recs = row["recommendations"] or []
        applied = [r["move"] for r in recs if r.get("applied")]
        assert len(applied) == 1, recs  # one move built per step, and the record says which
        assert all(r.get("applied") is False for r in recs if r["move"] not in applied)
        assert applied[0] in moves_of(row["code"])
        new_moves.append(applied[0])
    # never the same program twice: a move comes back only on a new best (its base changed; tests/test_slow_best.py),
    # at most 4 + 3 + 2 + 1 builds for these four moves, inside the budget
    schedules = [moves_of(row["code"]) for row in built]
    assert len(set(map(frozenset, schedules))) == len(schedules), new_moves
    assert {"parallelize_rows", "vectorize", "block_shape", "unroll"} <= set(new_moves)
    # the end: one iteration saying nothing is left, then the run stops with that reason (budget not burnt)
    last = optimization[-1]
    assert last["status"] == "no_program" and "recommended no move" in last["reason"]
    assert len(optimization) == len(built) + 1 < cfg.max_optimization_iters
    (done,) = [e for e in seen if e.kind == "run_finished"]
    assert summary["status"] == "succeeded" and done.stop_reason == last["reason"]
    assert "patience" not in done.stop_reason


def scripted(ms_by_iteration: dict[int, float], wrong: set[int] = frozenset()):
    def evaluate(problem, code, target, options):
        index = len(calls)
        calls.append(code)
        if index in wrong:
            return Verdict("incorrect", "values differ", target)
        ms = ms_by_iteration.get(index, 2.0)
        return Verdict("correct", "ok", target, candidate=Timing(ms, ms, ms, 3), eager=Timing(1.0, 1.0, 1.0, 3))
    calls: list[str] = []
    return evaluate


_AGENTS: dict = {}


def run_scripted(cfg: RunConfig, evaluate) -> list:
    # one agent pair for these tests: it keeps its traces (a child process each), so SIGMOID is traced once
    if not _AGENTS:
        _AGENTS["pair"] = build_agents(cfg)
    generator, analyzer = _AGENTS["pair"]
    return list(Synthesis(cfg, generator, analyzer, evaluate_fn=evaluate).events())


def test_slower_and_failed_moves_still_leave_the_others_to_try():
    """Each move on top of the kept best is slower (or wrong): the best stays #0, and every other recommended
    move is still built, once; the history given to the analysis names only built moves."""
    events = run_scripted(config(), scripted({0: 1.0}, wrong={2}))
    finished = [e for e in events if e.kind == "iteration_finished" and e.pass_name == "optimization"]
    built = [e for e in finished if e.code]
    applied = [[r["move"] for r in e.recommendations if r.get("applied")] for e in built]
    assert [len(a) for a in applied] == [1] * len(built)
    flat = [a[0] for a in applied]
    assert len(flat) == len(set(flat)) and {"parallelize_rows", "vectorize", "block_shape", "unroll"} <= set(flat)
    for e, (move,) in zip(built, applied):  # each built on the kept best (#0, plain): its one move, nothing else
        assert moves_of(e.code) - {"fuse"} == {move}
    (done,) = [e for e in events if e.kind == "run_finished"]
    assert done.status == "succeeded" and done.best_iteration == 0 and "recommended no move" in done.stop_reason


def test_a_module_the_synthesizer_cannot_write_ends_unsupported_once_with_its_reason():
    """No model is involved and the same request gets the same answer: one iteration, one true message, and the
    run ends `unsupported` (the synthesizer's reach), not `failed`."""
    flip = SIGMOID.replace("torch.sigmoid(x)", "torch.flip(x, [0])")
    events = run_scripted(config(problem_source=flip, problem_name="flip", max_functional_iters=5),
                          scripted({}))
    finished = [e for e in events if e.kind == "iteration_finished"]
    assert [e.status for e in finished] == ["no_program"]
    (done,) = [e for e in events if e.kind == "run_finished"]
    assert done.status == "unsupported" and done.error == finished[0].reason == done.stop_reason
    assert "flip" in done.error
