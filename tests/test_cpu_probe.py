"""The caller's CPU probe on a candidate's process and the judge's deferred-work check, without an evaluation.

The probe is exercised on real processes that burn a known amount of CPU time (measured by their own clock, so the
assertions hold however busy the machine is); the check's arithmetic on readings set by hand.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from kforge_core.eval.cpu_probe import CpuProbe, read_probe, tree_cpu_ns
from kforge_core.eval.harness.cpu_check import CpuWatch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-process CPU clocks: Linux")

# burns `ms` of its own CPU time, says so, then sleeps until killed
BURN = ("import sys, time\nms = float(sys.argv[1])\nwhile time.process_time() * 1000 < ms: pass\n"
        "print('burnt', flush=True)\ntime.sleep(60)\n")
# starts a burning grandchild, waits for it to finish burning, then sleeps
PARENT = ("import subprocess, sys, time\np = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], "
          "stdout=subprocess.PIPE, text=True)\np.stdout.readline()\nprint('burnt', flush=True)\ntime.sleep(60)\n")


def _start(*args) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "burnt"
    return p


def _stop(p: subprocess.Popen) -> None:
    for child in _kids(p.pid):
        os.kill(child, 9)
    p.kill()
    p.wait()


def _kids(pid: int) -> list[int]:
    try:
        return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


def test_reading_before_the_process_is_named_is_unknown():
    probe = CpuProbe()
    try:
        assert read_probe(probe.judge_end) is None
    finally:
        probe.close()


def test_reading_covers_the_process_and_its_descendants():
    p = _start(PARENT, BURN, "150")
    probe = CpuProbe()
    try:
        probe.watch(p.pid)
        reading = read_probe(probe.judge_end)
        assert reading is not None and reading >= 150e6, reading  # the grandchild's 150 ms included
        assert tree_cpu_ns(p.pid) >= reading  # only grows
    finally:
        probe.close()
        _stop(p)


def test_reading_of_a_process_gone_is_unknown():
    p = _start(BURN, "1")
    probe = CpuProbe()
    try:
        probe.watch(p.pid)
        _stop(p)
        assert read_probe(probe.judge_end) is None
    finally:
        probe.close()


def test_probe_gone_gives_no_reading():
    probe = CpuProbe()
    end = probe.judge_end.dup()
    probe.close()
    time.sleep(0.05)
    assert read_probe(end) is None
    end.close()


def _watch(**cpu) -> CpuWatch:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    w = CpuWatch(os.dup(ours.fileno()))  # never read here: the readings are set by hand
    ours.close()
    theirs.close()
    for op, (ns, n) in cpu.items():
        w.cpu[op], w.count[op] = ns, n
    return w


def test_honest_readings_pass(monkeypatch):
    """Numbers like an honest OpenMP kernel's on the 2-core box: lots of CPU inside the calls, a fetch about the
    judge's own copy, microseconds between requests."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    w = _watch(time=(14_000_000, 3), call=(40_000_000, 5), fetch=(4_200_000, 3))
    w.judge_copy_ns, w.idle_ns, w.windows = 4_000_000, 120_000, 30
    check, reason = w.judge()
    assert check["passed"] and not reason, check


def test_work_after_the_calls_is_rejected(monkeypatch):
    """The timed calls return at once; their work shows in the fetches and between requests."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    w = _watch(time=(600_000, 3), call=(30_000_000, 3), fetch=(13_000_000, 3))
    w.judge_copy_ns, w.idle_ns, w.windows = 3_000_000, 4_000_000, 26
    check, reason = w.judge()
    assert not check["passed"] and "[rule no-deferred-work]" in reason, (check, reason)


def test_idle_time_is_not_judged_when_pools_may_spin(monkeypatch):
    """Under a non-passive OpenMP wait policy idle pools spin by design: the windows between requests are not
    judged (and the check says so); a fetch beyond its allowance still is."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    w = _watch(time=(10_000_000, 3), call=(30_000_000, 3), fetch=(3_000_000, 3))
    w.judge_copy_ns, w.idle_ns, w.windows = 3_000_000, 500_000_000, 26
    check, reason = w.judge()
    assert check["passed"] and not reason and "not judged" in check["detail"], check


def test_unreadable_probe_says_not_checked():
    w = _watch()
    w.unreadable = "the caller could not read the candidate's process's CPU time"
    check, reason = w.judge()
    assert check["passed"] and not reason and check["detail"].startswith("not checked"), check
