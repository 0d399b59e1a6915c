"""The evaluation child's sandbox: environment scrubbing, process-group timeouts, nonce framing."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from kforge_core.eval.child_setup import child_environment
from kforge_core.eval.sandbox import _unframe, run_child


def test_child_environment_strips_secrets(monkeypatch, tmp_path):
    """Credentials never reach the child: by name pattern (*_KEY, *_TOKEN, *SECRET*, OPENAI_*, ...) even when the
    name is on the allow-list (KFORGE_*, TORCH_*), and anything not on the allow-list is dropped."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("MY_TOKEN", "tok-test-secret")
    monkeypatch.setenv("KFORGE_API_KEY", "kf-test-secret")
    monkeypatch.setenv("TORCH_HUB_TOKEN", "hub-test-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-test-secret")
    monkeypatch.setenv("DATABASE_PASSWORD", "pw-test-secret")
    monkeypatch.setenv("SOME_UNRELATED_SETTING", "x")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    env = child_environment(tmp_path)
    assert not any("secret" in v for v in env.values()), {k for k, v in env.items() if "secret" in v}
    for name in ("OPENAI_API_KEY", "MY_TOKEN", "KFORGE_API_KEY", "TORCH_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY",
                 "DATABASE_PASSWORD", "SOME_UNRELATED_SETTING"):
        assert name not in env
    assert env["OMP_NUM_THREADS"] == "2"
    assert env["HOME"] == str(tmp_path)
    assert "PATH" in env and env["KFORGE_CACHE_DIR"]


def test_run_child_environment_has_no_secrets(monkeypatch):
    """End to end through run_child: the child process itself does not see the parent's secrets."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("MY_TOKEN", "tok-test-secret")
    out = run_child({}, {}, timeout_s=60, memory_limit_mb=None, limit_address_space=False,
                    module="tests.candidates.sandbox.envdump")
    assert out.result is not None, out.log
    assert "OPENAI_API_KEY" not in out.result["environ"] and "MY_TOKEN" not in out.result["environ"]


def test_child_working_directory_is_not_on_sys_path():
    """Planted modules: the child's working directory is the candidate's private directory, which it might write; a
    `python -m` child would put it at the head of sys.path, where torch's lazy imports (`import sympy`) find a
    planted sympy.py first. Children (and the builtin tracer's, which runs its own module) start with -P and -s."""
    out = run_child({}, {"sympy.py": "raise SystemExit(3)\n"}, timeout_s=60, memory_limit_mb=None,
                    limit_address_space=False, module="tests.candidates.hostile.syspath_dump")
    assert out.result is not None, out.log
    cwd = os.path.realpath(out.result["cwd"])
    assert "" not in out.result["sys_path"] and "." not in out.result["sys_path"]
    assert cwd not in {os.path.realpath(p) for p in out.result["sys_path"]}, out.result["sys_path"]
    assert out.result["no_user_site"]
    if sys.version_info >= (3, 11):
        assert out.result["safe_path"]


def test_scrub_sys_path_drops_the_current_and_writable_directories(monkeypatch, tmp_path):
    """A forked child inherits the fork server's sys.path (and '' would resolve to the child's new working
    directory): child.serve scrubs '', '.', the working directory, HOME and what lies under them."""
    from kforge_core.eval.harness.child import scrub_sys_path

    work, home, keep = tmp_path / "work", tmp_path / "home", tmp_path / "lib"
    for d in (work, home, keep, work / "sub"):
        d.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(sys, "path", ["", ".", str(work), str(work / "sub"), str(home), str(keep), "x/.."])
    scrub_sys_path(work)
    assert sys.path == [str(keep)]


def _dead(pid: int) -> bool:
    """The process `pid` (as seen here) has exited, or is a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return any(line.startswith("State:") and ("Z" in line or "X" in line) for line in status.splitlines())


def _processes_running(marker: str) -> list[int]:
    """Pids (as seen here) of live processes whose command line contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next(line for line in Path(f"/proc/{entry}/status").read_text().splitlines()
                         if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if marker in cmdline and "Z" not in state:
            found.append(int(entry))
    return found


def test_timeout_kills_every_descendant():
    """On timeout the whole process group dies (a grandchild `sleep`), and with OS isolation also a daemon that
    left the group with setsid: it dies with the evaluation's PID namespace."""
    import random

    marker = f"299.{random.randrange(10**8, 10**9)}"
    start = time.monotonic()
    out = run_child({"marker": marker}, {}, timeout_s=5, memory_limit_mb=None, limit_address_space=False,
                    module="tests.candidates.sandbox.sleeper")
    assert out.timed_out and out.result is None, out
    assert time.monotonic() - start < 20
    deadline = time.monotonic() + 5
    while _processes_running(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _processes_running(marker)
    for pid in left:  # cleaned up first; the setsid daemon escapes without a PID namespace (docs/EVALUATOR.md)
        os.kill(pid, 9)
    if out.isolation != "namespaces":
        assert len(left) <= 1, f"the process group survived the timeout: {left}"
        return
    assert not left, f"processes survived the evaluation: {left}"


def test_unframe_needs_the_nonce():
    """Only output framed by this run's nonce counts; forged frames and frames with another nonce are ignored."""
    nonce = "a" * 32
    forged = '<<0123>>{"status": "correct"}<</0123>>'
    assert _unframe(forged, nonce) is None
    assert _unframe('<<>>{"status": "correct"}<</>>', nonce) is None
    real = f'<<{nonce}>>{{"status": "incorrect"}}<</{nonce}>>'
    assert _unframe(forged + real, nonce) == {"status": "incorrect"}
    assert _unframe(f"<<{nonce}>>not json<</{nonce}>>", nonce) is None


def test_forged_frames_printed_by_the_child_are_ignored():
    """A child that prints framed 'correct' results under guessed nonces gives the caller no result at all."""
    out = run_child({}, {}, timeout_s=60, memory_limit_mb=None, limit_address_space=False,
                    module="tests.candidates.sandbox.forger")
    assert out.result is None
    assert out.returncode == 0 and not out.timed_out


def test_caller_is_non_dumpable_after_run_child():
    """The caller makes itself non-dumpable, so same-user processes cannot read its /proc/<pid>/environ."""
    import ctypes

    run_child({}, {}, timeout_s=60, memory_limit_mb=None, limit_address_space=False,
              module="tests.candidates.sandbox.envdump")
    libc = ctypes.CDLL(None)
    assert libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE


def test_every_run_gets_a_fresh_nonce():
    """Every run gets a new random nonce, so a result cannot be replayed or predicted."""
    nonces = []
    for _ in range(2):
        out = run_child({}, {}, timeout_s=60, memory_limit_mb=None, limit_address_space=False,
                        module="tests.candidates.sandbox.envdump")
        nonces.append(out.result["nonce"])
    assert nonces[0] != nonces[1] and all(len(n) == 32 for n in nonces)


def test_drop_privileges_leaves_no_capabilities():
    """What every evaluation child (spawned, or forked by the fork server) applies: no new privileges, and as root
    no capabilities at all (CAP_SYS_PTRACE would override the caller's non-dumpable flag)."""
    import pytest

    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux /proc")
    from kforge_core.eval.isolation import drop_privileges, in_fork

    def dropped_status() -> bytes:
        drop_privileges()
        return Path("/proc/self/status").read_bytes()

    status = in_fork(dropped_status)
    fields = dict(line.split(":\t", 1) for line in status.decode().splitlines() if ":\t" in line)
    assert fields["NoNewPrivs"].strip() == "1"
    if os.geteuid() == 0:
        assert int(fields["CapEff"], 16) == 0 and int(fields["CapPrm"], 16) == 0 and int(fields["CapBnd"], 16) == 0
