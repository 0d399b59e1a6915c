"""The caller's CPU probe on a candidate's process: how much CPU time it has used, read on the judge's request.

The judge cannot see the candidate's process (another PID namespace); the caller started both and can. Each judged
evaluation gets one SOCK_SEQPACKET socket pair per candidate's process: the judge holds one end (`cpu_fd`, or
`cpu_fd_<name>` in a contest) and asks with a one-byte message whenever it wants a reading; a thread here answers with
the CPU time (user + system, nanoseconds) of the whole process tree the caller started for that candidate: the
launcher or relay outside the namespaces, the candidate's process (every thread, those that ended included) and
whatever it forked. The reading is the kernel's per-process CPU clock (`clock_gettime` on the process's CPU-time
clock id), precise to the nanosecond and blind to how busy the machine is; -1 when it cannot be read (the process is
not started yet, or has ended). The judge (`harness/cpu_check.py`) turns readings around its requests into the
check for work done outside the candidate's calls.

The judge learns nothing here but a number about a process it already talks to: no pid, no path, no descriptor of
the caller's.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from pathlib import Path

UNKNOWN = -1
_READING = struct.Struct("<q")


def usable_cores() -> int:
    """The cores this process may run on (its affinity), which CPU time is spread over; the thread count every
    timed process is given (child_setup.timing_environment) and the CPU check's divisor (harness.remote)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def process_cpu_ns(pid: int) -> int | None:
    """CPU time of process `pid` (every thread, ended ones included), or None when it cannot be read."""
    try:  # the process-wide CPU-time clock: CPUCLOCK_SCHED (2) of pid, as clock_getcpuclockid(3) makes it
        return time.clock_gettime_ns((~pid << 3) | 2)
    except (OSError, OverflowError):
        return None


def _children(pid: int) -> list[int]:
    """Children of every thread of `pid` (a process forked from a thread shows under that thread only)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            pass
    return out


def tree_cpu_ns(root: int) -> int | None:
    """CPU time of `root` and its live descendants, or None when `root` itself cannot be read."""
    first = process_cpu_ns(root)
    if first is None:
        return None
    total, seen, stack = first, {root}, _children(root)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += process_cpu_ns(pid) or 0
        stack += _children(pid)
    return total


class CpuProbe:
    """One probe: `judge_end` goes to the judge; `watch(pid)` names the process tree to read (the pid the caller
    started, from `sandbox.run_child`'s `on_start`)."""

    def __init__(self):
        self.judge_end, self._ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.root: int | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True, name="kforge-cpu-probe")
        self._thread.start()

    def watch(self, pid: int) -> None:
        self.root = pid

    def reading(self) -> int:
        root = self.root
        value = tree_cpu_ns(root) if root is not None else None
        return UNKNOWN if value is None else value

    def _serve(self) -> None:
        try:
            while self._ours.recv(16):  # any message is a request for one reading; b"" is the judge gone
                self._ours.send(_READING.pack(self.reading()))
        except OSError:
            pass
        finally:
            self._ours.close()

    def close(self) -> None:
        self.judge_end.close()
        try:
            self._ours.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def read_probe(sock: socket.socket) -> int | None:
    """The judge's side: one reading (ns), or None when the caller could not read it or the probe is gone."""
    try:
        sock.send(b"?")
        data = sock.recv(_READING.size)
    except OSError:
        return None
    if len(data) != _READING.size:
        return None
    value = _READING.unpack(data)[0]
    return None if value < 0 else value
