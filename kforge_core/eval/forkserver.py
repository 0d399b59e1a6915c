"""The caller's side of the evaluation fork server (`kforge_core.eval.harness.zygote`).

One fork server per caller process and child environment, started on first use, restarted if it dies. It is
started exactly like an evaluation child (scrubbed environment, no capabilities, own session, parent-death
signal), so what it forks holds no secret and no privilege either. Linux only (macOS frameworks are not fork-safe);
`KFORGE_EVAL_SPAWN=1` turns it off, and any failure to start it falls back to spawning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from ..errors import SandboxError

START_TIMEOUT_S = 180.0


def enabled() -> bool:
    return sys.platform.startswith("linux") and os.environ.get("KFORGE_EVAL_SPAWN", "") not in ("1", "true", "yes")


class ForkServer:
    def __init__(self, env: dict[str, str]):
        from .sandbox import limits, popen_lasting, python_command

        self.dir = Path(tempfile.mkdtemp(prefix="kforge-forkserver-"))
        self._cond = threading.Condition()
        self._pids: dict[str, int] = {}
        self._exits: dict[int, int] = {}
        self.ready = False
        self.dead = False
        self._write_lock = threading.Lock()
        log = open(self.dir / "forkserver.log", "wb")
        self.proc = popen_lasting(python_command("kforge_core.eval.harness.zygote"), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log, cwd=self.dir, env={**env, "HOME": str(self.dir)},
                                     start_new_session=True, preexec_fn=limits(None, False))
        log.close()
        threading.Thread(target=self._read, daemon=True, name="kforge-forkserver").start()
        with self._cond:
            if not self._cond.wait_for(lambda: self.ready or self.dead, timeout=START_TIMEOUT_S) or self.dead:
                self.close()
                raise SandboxError(f"the evaluation fork server did not start: "
                                   f"{(self.dir / 'forkserver.log').read_text(errors='replace')[-500:]}")

    def _read(self) -> None:
        from .progress_channel import json_lines

        for msg in json_lines(self.proc.stdout):
            with self._cond:
                if msg.get("ready"):
                    self.ready = True
                elif "id" in msg:
                    self._pids[msg["id"]] = msg["pid"]
                elif "status" in msg:
                    self._exits[msg["pid"]] = os.waitstatus_to_exitcode(msg["status"])
                self._cond.notify_all()
        with self._cond:
            self.dead = True
            self._cond.notify_all()

    def fork(self, workdir: Path, request: dict, memory_limit_mb: int | None, limit_address_space: bool) -> int:
        key = uuid.uuid4().hex
        line = json.dumps({"id": key, "workdir": str(workdir), "request": request,
                           "memory_limit_mb": memory_limit_mb, "limit_address_space": limit_address_space})
        with self._write_lock:
            try:
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as e:
                raise SandboxError(f"the evaluation fork server is gone: {e}") from e
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._pids or self.dead, timeout=60) or key not in self._pids:
                raise SandboxError("the evaluation fork server did not fork a child")
            return self._pids.pop(key)

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
            return self._exits.pop(pid, -9 if self.dead else None)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_servers: dict[str, ForkServer] = {}
_lock = threading.Lock()


def get(env: dict[str, str]) -> ForkServer:
    """The fork server for this child environment (HOME aside), started if needed."""
    key = json.dumps({k: v for k, v in sorted(env.items()) if k != "HOME"})
    with _lock:
        server = _servers.get(key)
        if server is None or server.dead:
            if server is not None:
                server.close()
            server = _servers[key] = ForkServer(env)
        return server
