"""RLIMIT_FSIZE in isolated evaluations (kforge_core.eval.isolation, harness.child, harness.shared): the judge sizes
its shared arena past the limit -- KernelBench's 2-6 GiB tensors need an arena over the 4 GiB default, and sizing a
memfd counts like a file write (it failed with "OSError: [Errno 27] File too large") -- while every other process
(the candidate's above all) gets a hard limit it cannot raise. (Reaching `resource`, `open` or setrlimit from
candidate code is refused earlier, by the static rules and the native-symbol vetting; this is the layer under them.)

The evaluation runs for real on the CPU target with the limit turned down to 1 MiB (`KFORGE_EVAL_FSIZE_MB=1`) and
a problem whose tensor takes 4 MiB, so the arena is several times the limit."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kforge_core.eval import isolation
from kforge_core.eval.evaluator import EvalOptions, evaluate
from kforge_core.problem import load_problem

needs_isolation = pytest.mark.skipif(not isolation.status()[0], reason=f"no OS isolation here: "
                                                                        f"{isolation.status()[1]}")

FIXTURES = Path(__file__).resolve().parent / "fixtures_loop"
# the loop fixtures' ReLU problem at 1024 x 1024 (4 MiB a tensor) and their honest C++ ReLU
PROBLEM = (FIXTURES / "problem_relu.py").read_text().replace("torch.randn(32, 32)", "torch.randn(1024, 1024)")
CANDIDATE = (FIXTURES / "correct_fast.py").read_text()


@pytest.fixture
def one_mib_limit(monkeypatch):
    monkeypatch.setenv("KFORGE_EVAL_FSIZE_MB", "1")
    monkeypatch.setenv("KFORGE_EVAL_POOL", "0")  # a pre-started child would have the default limit


@needs_isolation
def test_judge_sizes_an_arena_past_the_file_size_limit(one_mib_limit):
    assert "1024, 1024" in PROBLEM
    v = evaluate(load_problem(text=PROBLEM, name="relu_4mib"), CANDIDATE, "cpu", EvalOptions(timing=False))
    assert v.status == "correct", (v.status, v.reason, v.log_tail)


def _in_child(code: str) -> str:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, cwd=os.getcwd(), check=True).stdout.strip()


def test_only_the_judge_keeps_the_hard_limit_open():
    """Soft 1 MiB, hard open (as isolation leaves it): a judge's request keeps the hard limit, every other role
    (the candidate's process, a build, a one-process evaluation) gets hard = soft before its code runs."""
    roles = {"judge": {"peer_fd": 5}, "contest": {"peer_fd_a": 5}, "worker": {"mode": "worker", "peer_fd": 5},
             "build": {"mode": "build"}, "one_process": {}}
    out = [_in_child(f'''
        import resource
        from kforge_core.eval.harness import child
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        child._close_file_size_limit({request!r})
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            raised = True
        except ValueError:
            raised = False
        print("{name}", soft == 1 << 20, hard == resource.RLIM_INFINITY, raised)
    ''') for name, request in roles.items()]
    assert out == ["judge True True True", "contest True True True", "worker True False False",
                   "build True False False", "one_process True False False"]


def test_sealed_memfd_lifts_the_soft_limit_for_its_size_only():
    out = _in_child('''
        import os, resource
        from kforge_core.eval.harness import shared
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        fd = shared.sealed_memfd(8 << 20)
        print(os.fstat(fd).st_size, resource.getrlimit(resource.RLIMIT_FSIZE)[0])
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # a hard limit: nothing to lift
        try:
            shared.sealed_memfd(8 << 20)
            print("sized")
        except OSError as e:
            print("refused", e.errno)
    ''')
    assert out.splitlines() == [f"{8 << 20} {1 << 20}", "refused 27"]
