"""Pre-started evaluation children (kforge_core.eval.warm_pool) and the fork server's device check
(kforge_core.eval.harness.zygote.device_touched): a waiting child serves one evaluation and is replaced; it sees
exactly what a child forked on demand sees; a runaway retires the pool with its server; KFORGE_EVAL_POOL=0 turns it
off; a fork server whose process touched the CUDA driver refuses to fork."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from candidates.evalkit import HOSTILE, Case, run_case
from kforge_core.eval import child_setup, forkserver, isolation, warm_pool
from kforge_core.eval.harness import zygote

EXAMPLE_PROBLEM = Path(__file__).resolve().parent.parent / "platforms" / "examples" / "cpu" / "problem.py"
SECRET = "sk-kforge-pool-test-0123456789abcdef"
needs_fork_server = pytest.mark.skipif(not forkserver.enabled(), reason="no fork server here (Linux only)")


def test_device_touched_says_why(monkeypatch):
    """The zygote refuses to start, and to fork, once torch.cuda is initialised or the driver's cuInit ran (which
    torch.cuda.is_available() does without touching torch's own flag)."""
    import torch

    monkeypatch.setattr(zygote, "_driver_initialised", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert zygote.device_touched() is None
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert "torch.cuda is initialised" in zygote.device_touched()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(zygote, "_driver_initialised", lambda: True)
    assert "cuInit" in zygote.device_touched()


def test_driver_check_never_loads_the_driver():
    """Asking is harmless: without libcuda already loaded the answer is no, and libcuda stays unloaded."""
    def mapped() -> bool:
        return "libcuda.so" in Path("/proc/self/maps").read_text()

    if mapped():
        pytest.skip("libcuda is loaded in this process already")
    assert zygote._driver_initialised() is False
    assert not mapped()


def test_fork_server_refuses_a_fork_when_the_device_was_touched(monkeypatch):
    """The caller's side of a refusal: no pid, a SandboxError saying why, and the server is retired (so the
    evaluation is spawned and no later one tries that server)."""
    from kforge_core.errors import SandboxError

    server = forkserver.ForkServer.__new__(forkserver.ForkServer)  # the bookkeeping only, no process
    server._cond, server._write_lock = threading.Condition(), threading.Lock()
    server._pids, server._exits, server._refused, server._discarded = {}, {}, {}, set()
    server.dead = server.retired = False
    server._active = 0
    server.pool = warm_pool.WarmPool(server)
    closed = []
    server.close = lambda: closed.append(True)

    def send(sock, msgs, fds):  # the zygote's answer, as _read records it
        with server._cond:
            server._refused[json.loads(msgs[0])["id"]] = "torch.cuda is initialised in the fork server"
            server._cond.notify_all()

    monkeypatch.setattr(forkserver.socket, "send_fds", send)
    server._sock = None
    with pytest.raises(SandboxError, match="torch.cuda is initialised"):
        server.fork(Path("/nonexistent"), {"mode": "evaluate"}, None, False, (), None)
    assert server.retired and closed and server._active == 0


def _waiting(server, n: int, timeout_s: float = 120.0) -> list[int]:
    """The pids of `n` waiting children once the pool has them (it fills in the background)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = server.pool.waiting()
        if len(pids) >= n:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"the pool did not fill: {server.pool.waiting()}, {dict(warm_pool.STATS)}")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _server():
    return forkserver.get(child_setup.child_environment(Path("/tmp"), isolation.status()[0]))


def _probes(verdict) -> list[dict]:
    return [json.loads(line.split("POOL-PROBE ", 1)[1]) for line in verdict.log_tail.splitlines()
            if "POOL-PROBE " in line]


@pytest.fixture
def caller(tmp_path, monkeypatch):
    """A caller with a key in its environment and a file in its HOME; rules disarmed so the probe can look."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text(SECRET)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("KFORGE_TEST_CALLER_HOME", str(home))
    monkeypatch.setenv("KFORGE_UNSAFE_DISARM", "1")
    monkeypatch.setenv("KFORGE_EVAL_SPAWN", "0")
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))  # a server (and pool) of this test's own
    return home


PROBE = Case("pool_probe", EXAMPLE_PROBLEM, HOSTILE / "pool_probe.py", {"timing": False})


@needs_fork_server
def test_pre_started_children_serve_once_are_replaced_and_see_what_forked_ones_see(caller, monkeypatch):
    """With the pool on, an evaluation takes the two waiting children (judge and candidate's process), which are
    then replaced by new ones; a used child never waits again. The candidate's process of a pre-started pair
    reports what one forked on demand (pool off) reports: PID 1 of its own namespace where there is isolation,
    its private directory as HOME, none of the caller's variables or files. With the pool off nothing is taken."""
    monkeypatch.setenv("KFORGE_EVAL_POOL", "1")
    first = run_case(PROBE)  # starts the server, forks on demand, and fills the pool for this kind of child
    assert first.status == "correct", (first.status, first.reason)
    server = _server()
    waiting = _waiting(server, 2)
    handed = warm_pool.STATS["handed_off"]
    pooled = run_case(PROBE)
    assert pooled.status == "correct", (pooled.status, pooled.reason)
    assert warm_pool.STATS["handed_off"] == handed + 2
    assert sorted(list(warm_pool.HANDED_OFF)[-2:]) == sorted(waiting)
    assert not any(_alive(pid) for pid in waiting)  # one evaluation each, then gone
    refilled = _waiting(server, 2)
    assert not set(refilled) & set(waiting)

    monkeypatch.setenv("KFORGE_EVAL_POOL", "0")
    handed = warm_pool.STATS["handed_off"]
    forked = run_case(PROBE)
    assert forked.status == "correct", (forked.status, forked.reason)
    assert warm_pool.STATS["handed_off"] == handed  # the switch: nothing was taken
    assert set(server.pool.waiting()) == set(refilled)  # nor started

    (seen_pooled, *_), (seen_forked, *_) = _probes(pooled), _probes(forked)
    for seen in (seen_pooled, seen_forked):
        assert seen["caller_home_file"] is False and seen["secret_vars"] == [], seen
        assert seen["home"] == seen["cwd"] and seen["home"] != str(caller), seen
        if isolation.status()[0]:
            assert seen["pid"] == 1 and seen["procs"] == [1], seen
    assert {k: v for k, v in seen_pooled.items() if k not in ("home", "cwd")} == \
        {k: v for k, v in seen_forked.items() if k not in ("home", "cwd")}
    assert SECRET not in pooled.log_tail and SECRET not in forked.log_tail


@needs_fork_server
def test_replacements_start_after_the_evaluation_not_beside_its_timed_calls(caller, monkeypatch):
    """Starting a child (a fork, namespaces; on GPU targets a CUDA context) takes host and device time: while an
    evaluation's children run -- from the hand-off of the two pre-started ones until they have exited, timing
    included -- the pool starts none; once the evaluation has ended, two wait again."""
    monkeypatch.setenv("KFORGE_EVAL_POOL", "1")
    assert run_case(PROBE).status == "correct"  # the server, and this kind of child kept warm
    server = _server()
    _waiting(server, 2)
    handed = warm_pool.STATS["handed_off"]
    timed = Case("example_timed", EXAMPLE_PROBLEM, EXAMPLE_PROBLEM.parent / "candidate.py", {"baselines": False})
    done, seen = threading.Event(), []

    def watch():  # what the pool holds or is starting, sampled while the two children it handed off run
        while not done.is_set():
            if warm_pool.STATS["handed_off"] >= handed + 2:
                with server.pool._lock:
                    held = sum(map(len, server.pool._slots.values())) + sum(server.pool._pending.values())
                if all(_alive(pid) for pid in list(warm_pool.HANDED_OFF)[-2:]):
                    seen.append(held)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        verdict = run_case(timed)
    finally:
        done.set()
        watcher.join()
    assert verdict.status == "correct", (verdict.status, verdict.reason)
    assert verdict.candidate is not None  # it was timed
    assert warm_pool.STATS["handed_off"] == handed + 2
    assert len(seen) > 20 and set(seen) == {0}, seen[:50]
    refilled = _waiting(server, 2)
    assert not set(refilled) & set(warm_pool.HANDED_OFF)


@needs_fork_server
def test_a_runaway_retires_the_pool_with_its_server(caller, monkeypatch):
    """A child that ran away (here: timed out) retires its fork server, and with it every child waiting in its
    pool: none of them is ever used, no replacement is started after the runaway, and the retired server exits once
    nothing of it is left."""
    from kforge_core.eval.evaluator import EvalOptions
    from kforge_core.platform import get_platform

    monkeypatch.setenv("KFORGE_EVAL_POOL", "1")
    monkeypatch.delenv("KFORGE_UNSAFE_DISARM")
    server = _server()
    spec = warm_pool.Spec.of("cpu", EvalOptions().memory_limit_mb, get_platform("cpu").limit_address_space,
                             isolation.status()[0])
    server.pool.prime(spec)  # the kind an evaluation uses: two start in the background
    before = _waiting(server, 2)
    hang = Case("python_infinite_loop", EXAMPLE_PROBLEM, HOSTILE / "python_infinite_loop.py",
                {"timing": False, "timeout_s": 8})
    v = run_case(hang)
    assert v.status == "timeout", (v.status, v.reason)
    assert set(before) <= set(warm_pool.HANDED_OFF)  # the runaway ran in the pre-started pair
    assert server.retired and server.pool.waiting() == [] and not +server.pool._pending
    server.proc.wait(timeout=60)  # its last child gone (the replacements discarded), the zygote exits
    assert not any(_alive(pid) for pid in before)
    assert _server() is not server


def test_a_server_that_would_not_start_is_not_retried_for_a_while(monkeypatch):
    """A kind of fork server that failed to start is skipped (spawning at once) until RETRY_AFTER_S has passed, and
    says why: on an H200 a CUDA server that would not start cost every evaluation a failed start."""
    from kforge_core.errors import SandboxError

    starts = []

    def failing(env, device):
        starts.append(device)
        raise SandboxError("the evaluation fork server did not start: refuses to start")

    monkeypatch.setattr(forkserver, "_failed", {})
    monkeypatch.setattr(forkserver, "ForkServer", failing)
    env = {"PATH": "/usr/bin", "KFORGE_TEST_KEY": "retry"}
    for _ in range(3):
        with pytest.raises(SandboxError):
            forkserver.get(env, "cuda")
    assert starts == ["cuda"]
    assert "refuses to start" in forkserver.failures()["cuda"]
    clock = time.monotonic() + forkserver.RETRY_AFTER_S + 1
    monkeypatch.setattr(forkserver.time, "monotonic", lambda: clock)
    with pytest.raises(SandboxError):
        forkserver.get(env, "cuda")
    assert starts == ["cuda", "cuda"]  # tried again once the pause is over
