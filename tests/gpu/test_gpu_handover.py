"""Tensors between the judge and the candidate's process in device memory (harness/device_arena.py): an arena made
by one process, mapped by another from the descriptor it was sent, values crossing both ways; an evaluation that
uses it, and the same with the host arena forced (KFORGE_DEVICE_HANDOVER=0), both correct and each saying which path
its tensors took. Skipped without an NVIDIA GPU; run with `bash scripts/gpu_check.sh judge`."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs an NVIDIA GPU: torch.cuda.is_available() is False; run scripts/gpu_check.sh judge on a GPU machine")]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "platforms" / "examples"
QUICK = {"baselines": False, "timing_options": {"min_trials": 5, "max_trials": 20, "budget_s": 0.5}}

# the other process: map the arena it is sent, double the 1024 floats at offset 0 into offset 4096, answer
OTHER_SIDE = textwrap.dedent("""
    import socket, sys, torch
    from kforge_core.eval.harness import device_arena
    sock = socket.socket(fileno=int(sys.argv[1]))
    msg, fds, _, _ = socket.recv_fds(sock, 100, 1)
    device_arena.prepare("cuda")
    arena = device_arena.DeviceArena.open(fds[0], int(msg), "cuda")
    x = arena.view(0, 1024, torch.float32)
    arena.view(4096, 1024, torch.float32).copy_(x * 2)
    arena.sync()
    sock.send(str(float(x.sum())).encode())
    sock.recv(10)  # keep the mapping until the other side has read
""")


def test_device_arena_crosses_to_another_process():
    from kforge_core.eval.harness import device_arena

    device_arena.prepare("cuda")
    arena = device_arena.DeviceArena.create(1 << 20, "cuda")
    assert arena.size >= 1 << 20 and arena.view(0, 4, torch.float32).device.type == "cuda"
    x = torch.randn(1024, device="cuda")
    arena.view(0, 1024, torch.float32).copy_(x)
    arena.sync()
    mine, theirs = socket.socketpair()
    child = subprocess.Popen([sys.executable, "-c", OTHER_SIDE, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                             cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    theirs.close()
    try:
        socket.send_fds(mine, [str(arena.size).encode()], [arena.fd])
        seen = float(mine.recv(100).decode())
        assert seen == pytest.approx(float(x.sum()), rel=1e-5)
        assert torch.equal(arena.view(4096, 1024, torch.float32).clone(), x * 2)
        mine.send(b"bye")
        assert child.wait(60) == 0
    finally:
        child.kill()
        mine.close()
        arena.close()


def _evaluate(**opts):
    from kforge_core.eval.evaluator import EvalOptions, evaluate
    from kforge_core.problem import Problem

    problem = EXAMPLES / "cuda" / "problem.py"
    return evaluate(Problem("example", problem.read_text(), problem), (EXAMPLES / "cuda" / "candidate.py").read_text(),
                    "cuda", EvalOptions(timeout_s=240, **opts))


@pytest.mark.parametrize("handover", ["1", "0"])
def test_evaluation_says_which_memory_its_tensors_crossed(monkeypatch, handover):
    monkeypatch.setenv("KFORGE_JUDGE", "1")
    monkeypatch.setenv("KFORGE_DEVICE_HANDOVER", handover)
    v = _evaluate(**QUICK)
    assert v.status == "correct", (v.reason, v.log_tail[-3000:])
    detail = next(c["detail"] for c in v.checks if c["name"] == "judged out of process")
    if handover == "1":
        assert "through device memory shared by descriptor" in detail, detail
    else:
        assert "through host shared memory" in detail and "KFORGE_DEVICE_HANDOVER=0" in detail, detail
    print(f"handover {handover}: {detail}; candidate {v.candidate_ms} ms")
