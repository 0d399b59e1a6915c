"""The caller's side of the evaluation fork server (`kforge_core.eval.harness.zygote`).

One fork server per caller process and child environment, started on first use, restarted if it dies. It is
started exactly like an evaluation child (scrubbed environment, no capabilities, own session, parent-death
signal), so what it forks holds no secret and no privilege either; it makes itself non-dumpable, and each child it
forks enters its own namespaces (`kforge_core.eval.isolation`) before anything else, so no child can see it in /proc or
reach its memory. A server whose child ran away (timed out, exceeded memory) is retired: later evaluations get a
fresh one, and the old one exits once its last child is gone. Requests go over a SOCK_SEQPACKET socket carrying the
child's output descriptors (created by the caller, `kforge_core.eval.channels`) as SCM_RIGHTS. Linux only (macOS
frameworks are not fork-safe); `KFORGE_EVAL_SPAWN=1` turns it off, and any failure to start it falls back to
spawning.

One server per device kind too: a "cuda" server (CUDA and Triton targets) also preloads Triton and is checked never
to have initialised the CUDA driver (`zygote.device_touched`), so its children create their own context after
entering their namespaces. Each server keeps its pre-started children (`kforge_core.eval.warm_pool`): retiring the
server discards them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from .. import tempdirs
from ..errors import SandboxError

START_TIMEOUT_S = 180.0


def enabled() -> bool:
    return sys.platform.startswith("linux") and os.environ.get("KFORGE_EVAL_SPAWN", "") not in ("1", "true", "yes")


class ForkServer:
    key = ""  # its key in the registry (set by get), under which a refusal to fork is remembered

    def __init__(self, env: dict[str, str], device: str = "cpu"):
        from .isolation import status
        # import circle (justified): sandbox starts this server, and the server gives its children sandbox's own
        # limits and start-up, so spawned and forked children are set up by one piece of code
        from .child_setup import python_command
        from .sandbox import limits, popen_lasting
        from .warm_pool import WarmPool

        self.dir = tempdirs.make("forkserver-")  # its cwd, HOME and log; removed by close
        self._closed = False
        self._cond = threading.Condition()
        self._pids: dict[str, int] = {}
        self._exits: dict[int, int] = {}
        self._refused: dict[str, str] = {}
        self._discarded: set[int] = set()
        self.device = device
        self.pool = WarmPool(self)
        self.ready = False
        self.dead = False
        self.retired = False
        self._active = 0
        self._write_lock = threading.Lock()
        log = open(self.dir / "forkserver.log", "wb")
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = popen_lasting([*python_command("kforge_core.eval.harness.zygote"), "--device", device],
                                      stdin=theirs,
                                      stdout=subprocess.PIPE, stderr=log, cwd=self.dir,
                                      env={**env, "HOME": str(self.dir)}, start_new_session=True,
                                      preexec_fn=limits(None, False, entering=status()[0]))
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        finally:
            theirs.close()
            log.close()
        with _open_lock:
            _open.add(self)
        threading.Thread(target=self._read, daemon=True, name="kforge-forkserver").start()
        with self._cond:
            started = self._cond.wait_for(lambda: self.ready or self.dead, timeout=START_TIMEOUT_S)
        if not started or self.dead:
            why = (self.dir / "forkserver.log").read_text(errors="replace")[-500:]
            self.close()
            raise SandboxError(f"the evaluation fork server did not start: {why}")

    def _read(self) -> None:
        from .progress_channel import json_lines

        for msg in json_lines(self.proc.stdout):
            with self._cond:
                if msg.get("ready"):
                    self.ready = True
                elif "refused" in msg:
                    self._refused[msg["id"]] = str(msg["refused"])
                elif "id" in msg:
                    self._pids[msg["id"]] = msg["pid"]
                elif "status" in msg:
                    if msg["pid"] in self._discarded:
                        self._discarded.discard(msg["pid"])
                    else:
                        self._exits[msg["pid"]] = os.waitstatus_to_exitcode(msg["status"])
                self._cond.notify_all()
        with self._cond:
            self.dead = True
            self._cond.notify_all()

    def fork(self, workdir: Path, request: dict | None, memory_limit_mb: int | None, limit_address_space: bool,
             fds: tuple[int, ...], plan: dict | None, cgroup_procs: str | None = None, warm: str | None = None) -> int:
        """Fork a child whose fds 1, 2, 3 (and 4, 5) are `fds` (result, harness log, candidate log, build channel,
        judge <-> candidate socket), isolated by `plan`. With `warm` (a target's name) and fds = (its control
        socket,): a pre-started child (`warm_pool`), not counted as running until it is handed a request."""
        key = uuid.uuid4().hex
        fields = {"warm": warm} if warm else {"request": request}
        msg = json.dumps({"id": key, "workdir": str(workdir), **fields, "plan": plan, "cgroup": cgroup_procs,
                          "memory_limit_mb": memory_limit_mb, "limit_address_space": limit_address_space})
        with self._cond:  # counted from now: a server retired meanwhile waits for this child before closing
            if self.retired and (warm or self._active <= 0):
                raise SandboxError("the evaluation fork server was retired")
            self._active += 0 if warm else 1
        try:
            with self._write_lock:
                try:
                    socket.send_fds(self._sock, [msg.encode()], list(fds))
                except OSError as e:
                    raise SandboxError(f"the evaluation fork server is gone: {e}") from e
            with self._cond:
                if not self._cond.wait_for(lambda: key in self._pids or key in self._refused or self.dead,
                                           timeout=60) or key not in self._pids:
                    why = self._refused.pop(key, "")
                    raise SandboxError(f"the evaluation fork server did not fork a child{': ' + why if why else ''}")
                return self._pids.pop(key)
        except SandboxError as e:
            if "did not fork" in str(e) and not self.dead:
                with _lock:
                    _failed[self.key] = (time.monotonic(), str(e)[-500:])
                retire(self)  # it refused (its device state) or hung: no later evaluation should try it
            if not warm:
                self.wait(-1, 0)  # uncount it (closes a retired server left idle)
            raise

    def adopt(self) -> None:
        """A pre-started child was handed a request: it counts as running from now (see `fork`)."""
        with self._cond:
            self._active += 1

    def forget(self, pid: int) -> None:
        """A discarded pre-started child: its exit report is of no interest."""
        with self._cond:
            if pid not in self._exits:  # its report is still to come (a pid remembered past it could be reused)
                self._discarded.add(pid)
            self._exits.pop(pid, None)

    def returncode(self, pid: int) -> int | None:
        """The child's exit code once it has exited (negative: killed by that signal); None while it runs."""
        with self._cond:
            if pid in self._exits:
                return self._exits[pid]
            if self.dead:  # its children die with it (parent-death signal)
                return -9
            return None

    def wait(self, pid: int, timeout_s: float) -> int | None:
        """Wait for the child's exit (after a kill, say) and forget it; None if it did not exit in time."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits or self.dead, timeout=max(0.0, deadline - time.monotonic()))
            code = self._exits.pop(pid, -9 if self.dead else None)
            self._active -= 1
            last = self.retired and self._active <= 0
        if last:
            self.close()
        return code

    def close(self) -> None:
        """Discard its pool, end it (it exits at EOF on its socket; its children die with it: parent-death signal)
        and remove its directory once it is gone, not before: it writes its log there until then. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
        self.pool.close()
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with _open_lock:
            _open.discard(self)
        shutil.rmtree(self.dir, ignore_errors=True)


_servers: dict[str, ForkServer] = {}
_lock = threading.Lock()
# key -> (when, why) of a server that would not start or refused to fork: later evaluations spawn at once instead of
# paying a failed start each (on an H200 a CUDA server that would not start made every child 3 s slower than spawning)
_failed: dict[str, tuple[float, str]] = {}
RETRY_AFTER_S = 600.0
_open: set[ForkServer] = set()  # every server not closed yet, retired ones included (they may still run children)
_open_lock = threading.Lock()  # not _lock: a server registers itself here while get() may hold that one
_starting: dict[str, threading.Lock] = {}  # key -> held while a server of that key starts (not _lock: seconds)


def close_all() -> None:
    """End every fork server of this process (at exit: `tempdirs.at_exit`), running children and all."""
    with _lock:
        _servers.clear()
    with _open_lock:
        servers = list(_open)
    for server in servers:
        server.close()


tempdirs.at_exit(close_all)
os.register_at_fork(after_in_child=lambda: (_servers.clear(), _open.clear(), _starting.clear()))  # never ours


def failures() -> dict[str, str]:
    """Why a kind of fork server is not used now ({device kind: reason}), for benchmarks and diagnostics."""
    with _lock:
        return {json.loads(key)[0]: why for key, (_, why) in _failed.items()}


def running() -> list[str]:
    """The device kinds of the fork servers this process uses now (one entry per server), for diagnostics."""
    with _lock:
        return sorted(json.loads(key)[0] for key, server in _servers.items() if not server.dead)


def retire(server: ForkServer) -> None:
    """Start the next evaluation on a fresh server; this one exits once its running children are done."""
    with _lock:
        for key, s in list(_servers.items()):
            if s is server:
                del _servers[key]
    with server._cond:
        server.retired = True
        idle = server._active <= 0
    server.pool.close()  # its pre-started children were forked by a server that saw a runaway: never used
    if idle:
        server.close()


# HOME names the evaluation's own directory; the switches are read by the caller only (the pool on or off uses
# the same server)
_NOT_KEYS = ("HOME", "KFORGE_EVAL_POOL", "KFORGE_EVAL_SPAWN")


def get(env: dict[str, str], device: str = "cpu") -> ForkServer:
    """The fork server for this child environment (HOME aside) and device kind ("cpu", or "cuda": CUDA and Triton
    targets), started if needed. A start (seconds: a Python, torch's import) holds back only callers of the same
    kind: a run's first trace (the "cpu" server) no longer waited for its prepare thread's "cuda" server."""
    key = json.dumps([device, {k: v for k, v in sorted(env.items()) if k not in _NOT_KEYS}])
    with _lock:
        server = _usable(key)
        if server is not None:
            return server
        starting = _starting.setdefault(key, threading.Lock())
    with starting:
        with _lock:
            server = _usable(key)
            if server is not None:
                return server
            old = _servers.pop(key, None)
        if old is not None:
            old.close()
        try:
            server = ForkServer(env, device)
        except SandboxError as e:
            with _lock:
                _failed[key] = (time.monotonic(), str(e)[-500:])
            raise
        server.key = key
        with _lock:
            _servers[key] = server
            _failed.pop(key, None)
        return server


def _usable(key: str) -> ForkServer | None:
    """The running server of this key (None: start one); raises while a failed start is remembered. Under _lock."""
    failed = _failed.get(key)
    if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER_S:
        raise SandboxError(f"the {json.loads(key)[0]} fork server is not used for now: {failed[1]}")
    server = _servers.get(key)
    return server if server is not None and not server.dead else None


def kind_for(request: dict) -> str:
    """Which kind of fork server forks the child of this request: "cuda" for the CUDA and Triton targets (builds
    say the kind of the evaluation they belong to)."""
    from ..platform import all_platforms

    if "device_kind" in request:
        return request["device_kind"]
    platform = all_platforms().get(request.get("target", ""))
    return "cuda" if platform is not None and platform.device_type == "cuda" else "cpu"
