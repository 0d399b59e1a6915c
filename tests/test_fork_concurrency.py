"""Forks from a caller with threads (issue 28: the first problem of every Ray worker on a 4-GPU host failed with
"os.fork is unsafe while filelock is changing descriptor ownership"). filelock, which torch imports, adds an audit
hook on Python >= 3.12 that refuses an os.fork while another thread of the process is inside one; a run's first
generation (tracing) and its prepare thread (the fork server) both probed isolation at once."""

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The rule filelock's hook enforces, installed in a fresh interpreter (audit hooks cannot be removed): an os.fork
# while another fork of this process is between its before- and after-hooks raises RuntimeError.
RULE = textwrap.dedent("""
    import os, sys, threading, time
    forking = []
    def before():
        forking.append(threading.get_ident())
        time.sleep(0.02)  # a fork of a large process takes this long: the window other threads must not enter
    def after():
        forking.remove(threading.get_ident())
    os.register_at_fork(before=before, after_in_parent=after, after_in_child=lambda: forking.clear())
    def hook(event, args):
        if event == "os.fork" and forking:
            raise RuntimeError("os.fork is unsafe while filelock is changing descriptor ownership")
    sys.addaudithook(hook)
""")


def _run(body: str) -> subprocess.CompletedProcess:
    code = RULE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_rule_fails_plain_concurrent_forks():
    """The stand-in rule is real: plain os.fork from several threads at once is refused by it."""
    out = _run("""
        errors = []
        def work():
            try:
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
            except RuntimeError as e:
                errors.append(str(e))
        ts = [threading.Thread(target=work) for _ in range(6)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print("refused", len(errors))
    """)
    assert out.returncode == 0, out.stderr
    assert "refused 0" not in out.stdout, out.stdout


def test_in_fork_from_many_threads_at_once_is_never_refused():
    out = _run("""
        from kforge_core.eval.isolation import in_fork
        results, errors = [], []
        def work(i):
            try:
                results.append(in_fork(lambda: str(i).encode()))
            except Exception as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        [t.start() for t in ts]; [t.join() for t in ts]
        print(sorted(int(r) for r in results), errors)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{list(range(8))} []", out.stdout


def test_a_fork_by_a_thread_not_ours_is_waited_out():
    """Another library's fork in progress: ours retries for a moment instead of failing the evaluation."""
    out = _run("""
        from kforge_core.eval import isolation
        def foreign():
            pid = os.fork()  # not through isolation's lock: holds the rule's window for 20 ms
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        t = threading.Thread(target=foreign); t.start()
        while not forking:
            time.sleep(0.0005)
        print(isolation.in_fork(lambda: b"ok").decode())
        t.join()
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_isolation_is_probed_once_however_many_threads_ask(monkeypatch):
    from kforge_core.eval import isolation

    calls = []
    gate = threading.Event()

    def probe():
        calls.append(1)
        gate.wait(5)
        return True, ""

    monkeypatch.setattr(isolation, "_status", None)
    monkeypatch.setattr(isolation, "_probe", probe)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(isolation.status())) for _ in range(6)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert len(calls) == 1
    assert answers == [(True, "")] * 6


class _SlowServer:
    """Stands in for ForkServer: starting one takes `START_S` (a Python and torch's import), counted per device."""
    START_S = 0.8
    started: list[str] = []

    def __init__(self, env, device):
        import time

        _SlowServer.started.append(device)
        time.sleep(self.START_S if device == "slow" else 0.0)
        self.device, self.dead = device, False

    def close(self):
        self.dead = True


def test_a_server_starting_holds_back_only_its_own_kind(monkeypatch):
    """A run's first trace asks for the "cpu" server while its prepare thread starts the "cuda" one: the trace
    must not wait for that start (on the CPU box the wait was 3 s of the first generation)."""
    import time

    from kforge_core.eval import forkserver

    monkeypatch.setattr(forkserver, "ForkServer", _SlowServer)
    monkeypatch.setattr(forkserver, "_servers", {})
    monkeypatch.setattr(forkserver, "_starting", {})
    monkeypatch.setattr(forkserver, "_failed", {})
    _SlowServer.started = []
    env = {"PATH": "/usr/bin"}
    slow = threading.Thread(target=forkserver.get, args=(env, "slow"))
    slow.start()
    while "slow" not in _SlowServer.started:
        time.sleep(0.001)
    t0 = time.monotonic()
    fast = forkserver.get(env, "cpu")
    waited = time.monotonic() - t0
    slow.join()
    assert fast.device == "cpu"
    assert waited < _SlowServer.START_S / 2, f"the cpu server waited {waited:.2f} s for the other kind's start"


def test_callers_of_one_kind_at_once_share_one_start(monkeypatch):
    from kforge_core.eval import forkserver

    monkeypatch.setattr(forkserver, "ForkServer", _SlowServer)
    monkeypatch.setattr(forkserver, "_servers", {})
    monkeypatch.setattr(forkserver, "_starting", {})
    monkeypatch.setattr(forkserver, "_failed", {})
    _SlowServer.started = []
    got = []
    threads = [threading.Thread(target=lambda: got.append(forkserver.get({"A": "1"}, "slow"))) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert _SlowServer.started == ["slow"]
    assert len(got) == 5 and all(g is got[0] for g in got)
    got[0].dead = True  # a dead server is replaced by the next caller
    assert forkserver.get({"A": "1"}, "slow") is not got[0]
    assert _SlowServer.started == ["slow", "slow"]


def test_every_fork_server_asks_nvml_before_its_preloads_import_torch():
    """A "cpu" server on a GPU machine had initialised the CUDA driver while importing torch._dynamo/inductor
    (torch.cuda.is_available() without PYTORCH_NVML_BASED_CUDA_CHECK is cuInit), refused to start, and every trace
    and CPU child there was spawned: 2.7 s each instead of a fork. Both kinds set the switch before any import."""
    code = textwrap.dedent("""
        import importlib.abc, os, socket, sys
        class Finder(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "torch":
                    os.write(2, f"torch imported with the switch {os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK')}\\n"
                             .encode())
                    sys.meta_path.remove(self)
                return None
        sys.meta_path.insert(0, Finder())
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        os.dup2(b.fileno(), 0)
        a.close()  # no request will come: the server exits once it has started
        from kforge_core.eval.harness import zygote
        zygote.main(["--device", sys.argv[1]])
    """)
    for device in ("cpu", "cuda"):
        env = {k: v for k, v in __import__("os").environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
        out = subprocess.run([sys.executable, "-c", code, device], cwd=ROOT, capture_output=True, text=True,
                             timeout=300, env=env)
        assert "torch imported with the switch 1" in out.stderr, (device, out.stderr[-2000:])
