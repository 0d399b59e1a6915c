"""GPU evaluation children through the fork server (kforge_core.eval.forkserver, harness/zygote.py): a "cuda" fork
server imports torch and Triton without initialising the CUDA driver, and its children — forked on demand
(KFORGE_EVAL_POOL=0) or pre-started and warmed with their own CUDA context (kforge_core.eval.warm_pool) — judge
the CUDA and Triton examples correctly. Skipped without an NVIDIA GPU; run with `bash scripts/gpu_check.sh pool`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs an NVIDIA GPU: torch.cuda.is_available() is False; run scripts/gpu_check.sh pool on a GPU machine")]

EXAMPLES = Path(__file__).resolve().parents[2] / "platforms" / "examples"
QUICK = {"baselines": False, "timing_options": {"min_trials": 5, "max_trials": 20, "budget_s": 0.5}}


def _evaluate(target: str):
    from kforge_core.eval.evaluator import EvalOptions, evaluate
    from kforge_core.problem import Problem

    problem = EXAMPLES / target / "problem.py"
    return evaluate(Problem("example", problem.read_text(), problem), (EXAMPLES / target / "candidate.py").read_text(),
                    target, EvalOptions(timeout_s=240, **QUICK))


def _cuda_server():
    from kforge_core.eval import forkserver

    servers = [s for s in forkserver._servers.values() if s.device == "cuda" and not s.dead and not s.retired]
    assert servers, f"no live cuda fork server: {[(s.device, s.dead, s.retired) for s in forkserver._servers.values()]}"
    return servers[0]


def _wait_for_pool(server, n: int = 2, timeout_s: float = 120.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(server.pool.waiting()) >= n:
            return server.pool.waiting()
        time.sleep(0.1)
    raise AssertionError(f"the pool did not fill: {server.pool.waiting()}")


@pytest.mark.parametrize("target", ["cuda", "triton"])
def test_judged_through_the_fork_server_forked_and_pre_started(monkeypatch, target):
    """Forked on demand first (the server starts, so its zygote passed its device check), then by the pre-started
    pair: both correct, the pair was handed the evaluation, and the server never touched the driver."""
    from kforge_core.eval import warm_pool

    monkeypatch.setenv("KFORGE_JUDGE", "1")
    monkeypatch.setenv("KFORGE_EVAL_SPAWN", "0")
    monkeypatch.setenv("KFORGE_EVAL_POOL", "0")
    forked = _evaluate(target)
    assert forked.status == "correct", (forked.status, forked.reason, forked.log_tail[-2000:])
    server = _cuda_server()
    monkeypatch.setenv("KFORGE_EVAL_POOL", "1")
    _evaluate(target)  # asks for this kind of child: the pool fills behind it
    waiting = _wait_for_pool(server)
    handed = warm_pool.STATS["handed_off"]
    pooled = _evaluate(target)
    assert pooled.status == "correct", (pooled.status, pooled.reason, pooled.log_tail[-2000:])
    # the pair handed this evaluation was among the waiting children (earlier tests may have left others waiting:
    # on a 2-GPU H200 machine four were)
    assert warm_pool.STATS["handed_off"] == handed + 2 and set(list(warm_pool.HANDED_OFF)[-2:]) <= set(waiting)
    # the zygote checks itself before every fork (zygote.device_touched): a refusal would have retired it
    assert _cuda_server() is server
