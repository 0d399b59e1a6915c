"""Pre-started evaluation children: each fork server keeps two children per kind of evaluation already forked,
isolated and warmed, waiting for a request, so an evaluation pays neither the fork and namespace set-up nor (on GPU
targets) the device context. Two, because a judged evaluation is two children (the judge and the candidate's
process, `kforge_core.eval.judged`); a pre-started child serves either role, since they differ only in their request
and descriptors.

A pre-started child is set up exactly as a child forked on demand (`harness.zygote`): the same scrubbed
environment, resource limits, pids cgroup, namespaces and new root, no capabilities, its own private directory.
Only its directory, cgroup and isolation plan are made ahead of time here, for the evaluation that will take it;
files, the progress channel's FIFOs, and every descriptor (result, logs, build channel, judge <-> candidate socket)
are still made by the caller per evaluation, and handed over on the child's control socket (SCM_RIGHTS). Each child
serves one request and exits: a used child is never reused, and its replacement is started in the background once
the evaluation that used it has ended (`refill`), not at the hand-off: starting one (a fork, namespaces and, on GPU
targets, a CUDA context) while the evaluation times its kernels took host and device time from the timed calls. A kind of child (`Spec`: target, limits, isolation plan) is kept warm once an evaluation asked
for it; one kind per target and at most `MAX_SPECS` kinds per server (the least recently used is discarded). The fork server's
retirement (a runaway child) discards its pool: none of its waiting children is used.

On GPU targets each waiting child holds a CUDA context (some hundreds of MiB of device memory); `KFORGE_EVAL_POOL=0`
turns the pool off (every child is then forked on demand, as before).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from .. import tempdirs
from ..errors import SandboxError

POOL_SIZE = 2  # a judged evaluation's two children
MAX_SPECS = 2  # kinds of child kept warm per fork server
POOLED_MODES = ("evaluate", "worker", "head_to_head")  # builds and problem validation are forked on demand
HAND_OFF_TIMEOUT_S = 120.0  # a child taken while still warming (a CUDA context) may need this long to be ready
STATS: collections.Counter = collections.Counter()  # prestarted, handed_off, missed, failed, discarded
HANDED_OFF: collections.deque = collections.deque(maxlen=256)  # pids of children that were handed a request
_pools: set[WarmPool] = set()


def enabled() -> bool:
    return os.environ.get("KFORGE_EVAL_POOL", "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class Spec:
    """What makes two children interchangeable: the target whose device they warm, their limits, and their
    isolation plan (every field of it but the private directory's own paths)."""
    target: str
    memory_limit_mb: int | None
    limit_address_space: bool
    plan: str  # the plan's JSON without root and workdir; "" without isolation

    @classmethod
    def of(cls, target: str, memory_limit_mb: int | None, limit_address_space: bool, isolated: bool) -> Spec:
        from .child_setup import child_plan

        plan = ""
        if isolated:
            p = child_plan(Path(tempfile.gettempdir()) / "kforge-eval-spec")
            plan = json.dumps({k: v for k, v in p.items() if k not in ("root", "workdir")}, sort_keys=True)
        return cls(target, memory_limit_mb, limit_address_space, plan)


class Slot:
    """One pre-started child and what was made for it: its private directory, plan and cgroup."""

    def __init__(self, pid: int, workdir: Path, plan: dict | None, group, control: socket.socket, server):
        self.pid, self.workdir, self.plan, self.group = pid, workdir, plan, group
        self._control, self._server = control, server
        self.handed = self._stopped = False

    def hand_off(self, request: dict, fds: tuple[int, ...]) -> None:
        """Give the child its one request and the evaluation's descriptors; returns once it holds them. Raises
        SandboxError when it cannot take them (it died, failed its set-up, or is stuck warming)."""
        try:
            socket.send_fds(self._control, [json.dumps(request).encode()], list(fds))
            self._control.settimeout(HAND_OFF_TIMEOUT_S)
            while True:
                data = self._control.recv(1 << 16)
                reply = json.loads(data) if data else {"error": "the pre-started child is gone"}
                if reply.get("ok"):
                    break
                if "error" in reply:
                    raise SandboxError(f"the pre-started evaluation child failed: {reply['error']}")
        except (OSError, ValueError) as e:
            raise SandboxError(f"the pre-started evaluation child did not take its request: {e}") from e
        finally:
            self._control.close()
        self.handed = True
        STATS["handed_off"] += 1
        HANDED_OFF.append(self.pid)

    def stop(self) -> None:
        """End a child that was not handed its request (it ran nothing of a candidate's; its exit is of no interest),
        keep its directory. Idempotent; nothing once the child is an evaluation's (the caller ends that one)."""
        from .sandbox import _kill_group

        if self.handed or self._stopped:
            return
        self._stopped = True
        try:
            self._control.close()
        except OSError:
            pass
        self._server.forget(self.pid)
        _kill_group(self.pid, self.group)

    def discard(self) -> None:
        self.stop()
        STATS["discarded"] += 1
        if self.group is not None:
            self.group.remove()
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.plan and self.plan.get("root"):
            try:
                os.rmdir(self.plan["root"])
            except OSError:
                pass


class WarmPool:
    def __init__(self, server):
        self.server = server
        self._lock = threading.Lock()
        self._slots: dict[Spec, list[Slot]] = {}  # in order of last use: the first is the least recent
        self._pending: collections.Counter = collections.Counter()
        self._closed = False
        _pools.add(self)

    def take(self, spec: Spec) -> Slot | None:
        """A waiting child of this kind (None if none is there yet). Its replacement is started by `refill`, which the
        caller calls once the evaluation has ended."""
        with self._lock:
            if self._closed:
                return None
            slots = self._slots.pop(spec, [])
            self._slots[spec] = slots  # most recently used now
            slot = slots.pop(0) if slots else None
            # one kind per target (its plan changed: a file it binds appeared), MAX_SPECS kinds in all
            stale = [k for k in self._slots if k != spec and k.target == spec.target] + list(self._slots)[:-MAX_SPECS]
            evicted = [s for old in dict.fromkeys(stale) for s in self._slots.pop(old, [])]
        if slot is None:
            STATS["missed"] += 1
        for s in evicted:
            s.discard()
        return slot

    def prime(self, spec: Spec) -> None:
        """Pre-start this kind's children before any evaluation asks (a run that is about to need them)."""
        with self._lock:
            if self._closed:
                return
            self._slots.setdefault(spec, [])
        self.refill(spec)

    def refill(self, spec: Spec) -> None:
        """Start children of this kind, in the background, until POOL_SIZE wait or are starting."""
        with self._lock:
            if self._closed or spec not in self._slots:
                return
            missing = POOL_SIZE - len(self._slots[spec]) - self._pending[spec]
            self._pending[spec] += max(0, missing)
        for _ in range(max(0, missing)):
            threading.Thread(target=self._prestart, args=(spec,), daemon=True, name="kforge-warm-child").start()

    def _prestart(self, spec: Spec) -> None:
        slot = None
        try:
            slot = self._start(spec)
            STATS["prestarted"] += 1
        except (SandboxError, OSError):
            STATS["failed"] += 1  # evaluations fork on demand meanwhile
        finally:
            with self._lock:
                self._pending[spec] -= 1
                keep = slot is not None and not self._closed and spec in self._slots
                if keep:
                    self._slots[spec].append(slot)
        if slot is not None and not keep:
            slot.discard()

    def _start(self, spec: Spec) -> Slot:
        from . import isolation
        from .child_setup import child_plan, nproc_limit

        workdir = tempdirs.make("eval-")
        group = isolation.PidsCgroup.create(nproc_limit())
        plan = child_plan(workdir) if spec.plan else None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = self.server.fork(workdir, None, spec.memory_limit_mb, spec.limit_address_space, (theirs.fileno(),),
                                   plan, group and group.procs, warm=spec.target)
        except BaseException:
            ours.close()
            if group is not None:
                group.remove()
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            theirs.close()
        return Slot(pid, workdir, plan, group, ours, self.server)

    def waiting(self, spec: Spec | None = None) -> list[int]:
        """Pids of the children waiting now (of one kind, or all)."""
        with self._lock:
            return [s.pid for k, slots in self._slots.items() if spec in (None, k) for s in slots]

    def close(self) -> None:
        """Discard every waiting child; none is started any more."""
        with self._lock:
            self._closed = True
            slots = [s for group in self._slots.values() for s in group]
            self._slots.clear()
        _pools.discard(self)
        for s in slots:
            s.discard()


def start(server, slot: Slot | None, request: dict, fds: tuple[int, ...], workdir: Path, memory_limit_mb,
          limit_address_space: bool, plan: dict | None, group) -> int:
    """Start an evaluation child from `server`: hand `slot` its request, or fork one on demand (also when the
    pre-started child cannot take it: it is stopped first, and its directory, plan and cgroup are used as they are).
    Returns the child's pid; raises SandboxError when the server cannot fork either."""
    if slot is not None:
        try:
            slot.hand_off(request, fds)
            server.adopt()
            return slot.pid
        except SandboxError:
            STATS["failed"] += 1
            slot.stop()
    return server.fork(workdir, request, memory_limit_mb, limit_address_space, fds, plan, group and group.procs)


def settle(timeout_s: float = 60.0) -> bool:
    """Wait until no pool is starting a child (for callers that count their own descriptors and threads)."""
    import time

    deadline = time.monotonic() + timeout_s
    while any(+pool._pending for pool in list(_pools)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _close_all() -> None:  # waiting children die with the fork server; their directories are removed here
    for pool in list(_pools):
        pool.close()


tempdirs.at_exit(_close_all)
os.register_at_fork(after_in_child=_pools.clear)  # the parent's pools: never closed by a forked child
