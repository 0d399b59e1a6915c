"""A run starts what its evaluations need as it begins (`evaluator.prepare`): the fork server and the run's
torch.compile baseline are built beside the agent's first generation, not after it; a run that ends first stops a
build still under way; one problem's baseline build blocks no other problem's evaluations.
"""

from __future__ import annotations

import threading

from kforge_core.eval import baselines, warm_pool
from kforge_core.eval.evaluator import evaluate
from kforge_core.loop import Synthesis
from tests.loop_fixtures import FAST_TIMING, FIXTURES, ScriptedAgent, offline_config, scripted_evaluate, wait_for

# get_init_inputs sleeps only in the torch.compile baseline server (a slow build, whatever the machine), or until a
# gate file exists (at most SECONDS): a build that lasts exactly until the test lets it end
SLOW_IN_SERVER = '''
import os, sys, time
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(32, 32)]


def get_init_inputs():
    if sys.argv and sys.argv[0].endswith("baseline_server.py"):
        deadline = time.time() + SECONDS
        while time.time() < deadline and not (GATE and os.path.exists(GATE)):
            time.sleep(0.05)
    return []
'''


def _problem(seconds: float, gate: str = "") -> str:
    return SLOW_IN_SERVER.replace("SECONDS", str(seconds)).replace("GATE", repr(gate))


def _key(loop: Synthesis) -> str:
    return baselines.key_for(loop.problem.source, loop.config.size_class, loop.platform.name,
                             loop.platform.device_name())


def _pool_ready(loop: Synthesis) -> bool:
    """The run's pre-started children are all waiting: the pool of the kind its evaluations take is full."""
    from kforge_core.eval.child_setup import isolation_status
    from kforge_core.loop.types import FUNCTIONAL

    options = loop._eval_options(FUNCTIONAL)
    spec = warm_pool.Spec.of(loop.platform.name, options.memory_limit_mb, loop.platform.limit_address_space,
                             isolation_status()[0])
    return any(len(pool._slots.get(spec, [])) >= warm_pool.POOL_SIZE for pool in list(warm_pool._pools))


class WaitsForTheBuild(ScriptedAgent):
    """A model that takes as long as the baseline build needs to begin, and the pre-started children to be ready
    (a hosted model's reply takes seconds): the run's build must start during it."""

    loop: Synthesis

    def generate(self, request, on_token=None):
        wait_for(lambda: baselines.building(_key(self.loop)), 60, "the baseline build to start during generation")
        if warm_pool.enabled():
            wait_for(lambda: _pool_ready(self.loop), 60, "the run's pre-started children")
        return super().generate(request, on_token)


def test_the_baseline_is_built_while_the_agent_writes_the_first_program(tmp_path):
    """The build begins beside the first generation and outlasts it (until the gate opens): the first evaluation
    starts anyway, and waits for the rest of the build only at its timing phase, saying so there."""
    gate = tmp_path / "gate"
    started: list[str] = []
    real_init = baselines.BaselineServer.__init__

    def recording_init(self, *a, **kw):
        started.append(threading.current_thread().name)
        real_init(self, *a, **kw)

    cfg = offline_config(problem_source=_problem(300, str(gate)), eval_baselines=True,
                         eval_timing_options=FAST_TIMING, max_functional_iters=1, max_optimization_iters=0)
    agent = WaitsForTheBuild([(FIXTURES / "correct_fast.py").read_text()])
    baselines.BaselineServer.__init__ = recording_init
    missed = warm_pool.STATS.get("missed", 0)
    events = []
    missed_by_first: int | None = None
    try:
        loop = agent.loop = Synthesis(cfg, agent, agent, evaluate_fn=evaluate)
        for event in loop.events():
            events.append(event)
            if event.kind == "eval_stage" and event.stage.startswith("waiting for the torch.compile baseline"):
                gate.touch()  # the build may end now that the evaluation waits for it
            if event.kind == "eval_stage" and event.stage == "checking seed 1/5" and missed_by_first is None:
                missed_by_first = warm_pool.STATS.get("missed", 0)  # both of its children taken by now
    finally:
        gate.touch()
        baselines.BaselineServer.__init__ = real_init
    assert len(started) == 1  # one build for the run (the stage below says the run began it, not its evaluation)
    stages = [e.stage for e in events if e.kind == "eval_stage" and e.iteration == 0]
    waiting = "waiting for the torch.compile baseline (being built since the run started)"
    assert waiting in stages, stages
    # the candidate was built and checked before the evaluation waited: the wait is its timing phase's
    assert stages.index("checking seed 5/5") < stages.index(waiting) < stages.index("timing"), stages
    assert "building the torch.compile baseline" not in stages
    (done,) = [e for e in events if e.kind == "iteration_finished"]
    assert done.status == "correct" and done.speedup_vs_compiled is not None, done.reason
    assert _key(loop) not in baselines._servers  # released with the run
    if warm_pool.enabled():  # the evaluation's two children were pre-started by the run, of the kind it needed
        # (the first evaluation's: one re-timed for noisy timing starts before their replacements are ready)
        assert missed_by_first == missed


def test_a_run_that_ends_first_stops_the_build():
    cfg = offline_config(problem_source=_problem(300), eval_baselines=True, max_functional_iters=1,
                         max_optimization_iters=0)
    agent = WaitsForTheBuild([None])  # no program: the run ends without an evaluation
    loop = agent.loop = Synthesis(cfg, agent, agent, evaluate_fn=evaluate)
    events = list(loop.events())
    assert [e.kind for e in events][-1] == "run_finished"
    loop._prepare_thread.join(60)  # the build would take 300 s: only a stopped one lets the thread end
    assert not loop._prepare_thread.is_alive()
    assert _key(loop) not in baselines._servers and not baselines.building(_key(loop))


def test_prepare_is_off_with_a_fake_evaluator_and_when_asked(monkeypatch):
    cfg = offline_config(eval_baselines=True, max_functional_iters=1, max_optimization_iters=0)
    agent = ScriptedAgent(["# ms=1.0"])
    loop = Synthesis(cfg, agent, agent, evaluate_fn=scripted_evaluate)
    list(loop.events())
    assert loop._prepare_thread is None
    monkeypatch.setenv("KFORGE_PREPARE", "0")
    loop = Synthesis(cfg, ScriptedAgent([None]), agent, evaluate_fn=evaluate)
    list(loop.events())
    assert loop._prepare_thread is None


class _FakeServer:
    dead = False
    error = problem_error = None

    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def test_one_problems_build_blocks_no_other_problem():
    release_b = threading.Event()
    made: list[str] = []

    def slow_make():
        made.append("b")
        release_b.wait(30)
        return _FakeServer()

    a = baselines.get("test-key-a", _FakeServer)
    try:
        first_b: dict = {}
        builder = threading.Thread(target=lambda: first_b.setdefault("s", baselines.get("test-key-b", slow_make)))
        builder.start()
        wait_for(lambda: baselines.building("test-key-b"), 10, "the build of b")
        # another problem's server is handed out while b builds
        got_a: dict = {}
        reader = threading.Thread(target=lambda: got_a.setdefault("s", baselines.get("test-key-a", _FakeServer)))
        reader.start()
        reader.join(10)
        assert got_a.get("s") is a
        # a second caller for b waits for the build under way and gets its server: one build, not two
        second_b: dict = {}
        waiter = threading.Thread(target=lambda: second_b.setdefault("s", baselines.get("test-key-b", slow_make)))
        waiter.start()
        release_b.set()
        builder.join(10)
        waiter.join(10)
        assert made == ["b"] and second_b["s"] is first_b["s"]
    finally:
        release_b.set()
        for key in ("test-key-a", "test-key-b"):
            baselines.release(key)
    assert a.closed and first_b["s"].closed


def test_children_started_before_the_ceilings_were_stored_see_them(monkeypatch, tmp_path):
    """In a fresh cache the first timed evaluation measures the machine's ceilings (3 s on the 2-core box) and the
    caller stores them; the next evaluation's children were pre-started before that, and must see them rather than
    measure again (they bind the ceilings' folder, not the file the store replaces)."""
    from pathlib import Path

    from kforge_core.eval import ceilings
    from kforge_core.eval.evaluator import EvalOptions
    from kforge_core.platform import get_platform
    from kforge_core.problem import load_problem

    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    reported: list[dict] = []
    real = ceilings.store_reported
    monkeypatch.setattr(ceilings, "store_reported", lambda r: (reported.append(r) if r else None, real(r))[1])
    example = get_platform("cpu").example()
    problem, program = load_problem(path=example.problem), Path(example.candidate).read_text()
    options = EvalOptions(baselines=False, timing_options=FAST_TIMING)
    for _ in range(2):
        assert evaluate(problem, program, "cpu", options).status == "correct"
    assert len(reported) == 1, reported  # measured once, by the first evaluation
    assert ceilings.cached("cpu", get_platform("cpu").device_name())
