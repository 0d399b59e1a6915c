"""The run's torch.compile baseline is waited for lazily (issue 22, "verdicts in about a second"): an evaluation starts
its children at once, and only its timing phase (the judge's first relay request) waits for the baseline server's
build. A candidate that fails before timing gets its verdict while the build goes on; a correct one waits there,
says so, and is timed against the server as before; a cancel during that wait ends it; a server that cannot serve
gives the verdict it gave before.

Real processes throughout. The build is held back by a gate: the problem's get_init_inputs waits for a file, in the
baseline server only (at most 300 s), so "still building" is a fact of the test, not of the machine's speed. No time
is asserted beyond generous bounds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kforge_core.errors import ProblemError
from kforge_core.eval import baselines, judged
from kforge_core.eval.evaluator import EvalOptions, EvaluationCancelled, evaluate, head_to_head
from kforge_core.platform import get_platform
from kforge_core.problem import load_problem
from tests.loop_fixtures import wait_for
from tests.test_sandbox import _dead as _gone

LOOP = Path(__file__).parent / "fixtures_loop"
FAST_TIMING = {"min_trials": 3, "max_trials": 5, "budget_s": 0.2}
OPTIONS = EvalOptions(timing_options=FAST_TIMING)
WAITING = "waiting for the torch.compile baseline"

# ReLU (tests/fixtures_loop/problem_relu.py) whose baseline server, and only it, waits for GATE; AFTER runs there next
GATED = '''
import os, sys, time
import torch
import torch.nn as nn

GATE = {gate!r}


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(32, 32)]


def get_init_inputs():
    if sys.argv and sys.argv[0].endswith("baseline_server.py"):
        deadline = time.time() + 300
        while not os.path.exists(GATE) and time.time() < deadline:
            time.sleep(0.05)
        {after}
    return []


def _refuse(*args, **kwargs):
    raise RuntimeError("no torch.compile here")
'''
# what the server does once the gate opens, besides building: torch.compile fails there; the problem fails there
# (a problem error); the server dies before it is ready (it cannot start)
NO_COMPILE = "torch.compile = _refuse"
PROBLEM_FAILS = "raise ValueError('broken only in the baseline server')"
SERVER_DIES = "os._exit(3)"


def _gated(tmp_path: Path, after: str = "pass"):
    gate = tmp_path / "gate"
    problem = load_problem(text=GATED.format(gate=str(gate), after=after), name="relu_gated")
    key = baselines.key_for(problem.source, None, "cpu", get_platform("cpu").device_name())
    return problem, key, gate


def _program(name: str) -> str:
    return (LOOP / name).read_text()


@pytest.fixture(autouse=True)
def _no_servers_left():
    yield
    baselines.close_all()


def _opening(gate: Path, stages: list):
    """An on_stage that opens the gate once the evaluation says it waits for the build."""
    def on_stage(stage: dict) -> None:
        stages.append(stage["stage"])
        if stage["stage"].startswith(WAITING):
            gate.touch()
    return on_stage


def test_failing_candidates_get_their_verdicts_while_the_baseline_builds(tmp_path):
    """A candidate that does not compile, and one wrong on its first seed: each verdict comes while the build
    (300 s unless the gate opens) is still under way, with no wait; the build goes on and serves the next one."""
    problem, key, gate = _gated(tmp_path)
    before = baselines.stats["started"]
    try:
        for name, status in (("compile_error.py", "compile_error"), ("wrong.py", "incorrect")):
            stages: list = []
            v = evaluate(problem, _program(name), "cpu", OPTIONS, on_stage=lambda s: stages.append(s["stage"]))
            assert v.status == status, (v.reason, v.log_tail)
            assert baselines.building(key), "the verdict came after the build: it waited for it"
            assert not any(s.startswith(WAITING) for s in stages), stages
            assert v.compiled is None and not any("torch.compile" in w for w in v.warnings), v.warnings
        gate.touch()
        v = evaluate(problem, _program("correct_fast.py"), "cpu", OPTIONS)
        assert v.status == "correct", (v.reason, v.log_tail)
        assert v.baseline and v.baseline["compiled"] == "shared" and v.baseline["key"] == key
        assert v.compiled is not None and v.compiled.trials == v.candidate.trials
        assert baselines.stats["started"] - before == 1  # the first evaluation's build served the third
    finally:
        gate.touch()


def test_a_correct_candidate_waits_for_the_build_at_its_timing_phase(tmp_path):
    problem, key, gate = _gated(tmp_path)
    stages: list = []
    v = evaluate(problem, _program("correct_fast.py"), "cpu", OPTIONS, on_stage=_opening(gate, stages))
    assert v.status == "correct", (v.reason, v.log_tail)
    waiting = f"{WAITING} (being built since this evaluation started)"
    assert waiting in stages, stages
    # built, checked on every seed, then the wait, then timing: the wait belongs to the timing phase alone
    assert stages.index("building the candidate") < stages.index("checking seed 5/5") < stages.index(waiting) \
        < stages.index("timing"), stages
    assert "building the torch.compile baseline" not in stages  # the server's, not the child's
    # timed against the run's server, interleaved, as before
    assert v.baseline and v.baseline["compiled"] == "shared" and v.baseline["key"] == key
    assert v.compiled is not None and v.compiled.trials == v.candidate.trials
    assert v.torch_compile_s is not None
    check = next(c for c in v.checks if c["name"] == "timing conditions")
    assert "torch.compile baseline server" in check["detail"], check
    assert not any("unavailable" in w for w in v.warnings), v.warnings


def test_head_to_head_waits_for_the_build_alike(tmp_path):
    problem, _, gate = _gated(tmp_path)
    stages: list = []
    result = head_to_head(problem, {0: _program("correct_slow.py"), 1: _program("correct_fast.py")}, "cpu",
                          OPTIONS, on_stage=_opening(gate, stages))
    assert "error" not in result, result
    assert any(s.startswith(WAITING) for s in stages), stages
    assert stages.index("building contender c1") < \
        next(i for i, s in enumerate(stages) if s.startswith(WAITING)) < stages.index("timing head to head"), stages
    assert result["compiled"] and result["compiled"]["trials"] == result["contenders"][0]["trials"], result
    checks = {c["name"]: c for c in result["per_contender"][0]["checks"]}
    assert "torch.compile baseline server" in checks["timing conditions"]["detail"], checks


def test_cancel_while_waiting_for_the_build_ends_the_evaluation_at_once(tmp_path):
    """The gate never opens: the evaluation waits at its timing phase until the cancel, which ends it (its
    processes gone) within a generous bound, and stops the build it started."""
    problem, key, gate = _gated(tmp_path)
    stages: list = []
    box: dict = {}

    def on_stage(stage: dict) -> None:
        stages.append(stage)
        if stage["stage"].startswith(WAITING):
            box["cancel_at"] = time.monotonic()

    with pytest.raises(EvaluationCancelled):
        evaluate(problem, _program("correct_fast.py"), "cpu", OPTIONS, on_stage=on_stage,
                 cancel=lambda: "cancel_at" in box)
    ended = time.monotonic() - box["cancel_at"]
    assert ended < 15, f"evaluate returned {ended:.1f} s after the cancel"
    pids = {s["pid"] for s in stages if "pid" in s}
    assert pids, stages
    for pid in pids:
        deadline = time.monotonic() + 10
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid), "the judge survived the cancel"
    wait_for(lambda: not baselines.building(key), 30, "the cancelled evaluation's build to stop")
    assert key not in baselines._servers


def test_compiled_baseline_that_fails_in_the_server_says_why_as_before(tmp_path):
    """torch.compile fails in the server once the evaluation waits: the verdict is correct, without a compiled
    time, and its warning is the server's error, word for word the one a later evaluation (whose server had failed
    before it began) gives, as every evaluation gave before the wait was lazy."""
    problem, _, gate = _gated(tmp_path, NO_COMPILE)
    stages: list = []
    lazy = evaluate(problem, _program("correct_fast.py"), "cpu", OPTIONS, on_stage=_opening(gate, stages))
    assert any(s.startswith(WAITING) for s in stages), stages
    known = evaluate(problem, _program("correct_fast.py"), "cpu", OPTIONS)
    for v in (lazy, known):
        assert v.status == "correct", (v.reason, v.log_tail)
        assert v.compiled is None and v.baseline is None
        unavailable = [w for w in v.warnings if w.startswith("torch.compile baseline unavailable")]
        assert unavailable == ["torch.compile baseline unavailable: RuntimeError: no torch.compile here"], v.warnings
        assert "building the torch.compile baseline" not in stages  # the child did not compile it again


def test_a_problem_error_in_the_server_is_raised_as_before(tmp_path):
    problem, _, gate = _gated(tmp_path, PROBLEM_FAILS)
    stages: list = []
    with pytest.raises(ProblemError, match="broken only in the baseline server"):
        evaluate(problem, _program("correct_fast.py"), "cpu", OPTIONS, on_stage=_opening(gate, stages))
    assert any(s.startswith(WAITING) for s in stages), stages
    with pytest.raises(ProblemError, match="broken only in the baseline server"):  # known before the next starts
        evaluate(problem, _program("correct_fast.py"), "cpu", OPTIONS)


def test_a_server_that_cannot_start_leaves_the_child_to_compile_its_own(tmp_path):
    """The server dies before it is ready: as before, the evaluation child compiles the baseline itself."""
    problem, _, gate = _gated(tmp_path, SERVER_DIES)
    stages: list = []
    v = evaluate(problem, _program("correct_fast.py"), "cpu", OPTIONS, on_stage=_opening(gate, stages))
    assert v.status == "correct", (v.reason, v.log_tail)
    waited = next(i for i, s in enumerate(stages) if s.startswith(WAITING))
    assert stages.index("building the torch.compile baseline") > waited, stages
    assert v.compiled is not None and v.torch_compile_s is not None and v.baseline is None
    side = "eager (the judge)" if judged.enabled() else "candidate and eager (one process)"
    check = next(c for c in v.checks if c["name"] == "timing conditions")
    assert side in check["detail"] and "baseline server" not in check["detail"], check


def test_lazy_relay_opens_once_and_never_tells_a_time():
    """The relay's "open" waits for the server once; its answer says how the child gets its baseline, never a time;
    a timed request before "open" opens it; without a server it refuses the timed requests."""
    class FakeServer:
        conditions = {"threads": 2}

        def request(self, op, seed):
            return {"ms": 2.0} if op == "time" else {"ok": True}

    opened = []

    def open_server():
        opened.append(1)
        return {"compiled": "shared", "conditions": FakeServer.conditions}, FakeServer()

    relay = baselines.BaselineRelay(open_server=open_server)
    assert relay({"op": "open"}) == {"compiled": "shared", "conditions": {"threads": 2}}
    assert relay({"op": "open"}) == {"compiled": "shared", "conditions": {"threads": 2}} and opened == [1]
    assert relay({"op": "warm", "seed": 1}) == {"ok": True}
    assert relay({"op": "time", "trial": 0, "seed": 5}) == {"ok": True}
    assert relay.summary()["trials"] == 1

    early = baselines.BaselineRelay(open_server=open_server)
    assert early({"op": "time", "trial": 0, "seed": 5}) == {"ok": True} and opened == [1, 1]

    none = baselines.BaselineRelay(open_server=lambda: ({"compiled": "unavailable", "reason": "why"}, None))
    assert none({"op": "open"}) == {"compiled": "unavailable", "reason": "why"}
    assert none({"op": "time", "trial": 0, "seed": 5}) == {"error": "why"} and none.summary() is None


def test_the_wait_is_not_the_childs_time():
    """`grace()` (the seconds an evaluation waited for the build) is added to the child's time limit: a child that
    outlives its limit by less than that is not a timeout."""
    from kforge_core.eval.sandbox import run_child

    out = run_child({"seconds": 4}, {}, timeout_s=1, memory_limit_mb=None, limit_address_space=False,
                    module="tests.candidates.sandbox.waiter", grace=lambda: 60.0)
    assert not out.timed_out and out.returncode == 0, out
