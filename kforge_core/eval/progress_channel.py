"""The caller's side of an evaluation child's progress channel (child side: `kforge_core.eval.harness.progress`).

The caller makes two FIFOs in the child's private directory and opens both before the child starts (O_RDWR: an
open that never blocks and a read end that never sees EOF), so it reads only from descriptors it opened itself.
`pump()` runs in the caller's supervision loop: it takes what the child wrote (bounded), hands stage lines to
`on_stage`, and answers relay requests through `relay(message) -> dict`. Every line is untrusted input: stages are
reduced to a short name plus a few scalar fields, malformed lines are dropped, and relay requests are handed over
only when they name the next expected trial (see `kforge_core.eval.baselines.BaselineRelay`).
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Callable
from pathlib import Path

MAX_BUFFER = 1 << 16  # a line longer than this is junk: dropped
MAX_STAGES = 2000  # per evaluation; more is a child flooding the caller
_SCALARS = (str, int, float, bool, type(None))

StageSink = Callable[[dict], None]
Relay = Callable[[dict], dict]


def json_lines(stream):
    """The JSON objects of a line stream (a server's stdout), skipping anything else."""
    for line in stream:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict):
            yield msg


def clean_stage(obj: dict) -> dict | None:
    """A stage line reduced to what a UI may show: {"stage": short text, scalar fields...}."""
    name = obj.get("stage")
    if not isinstance(name, str) or not name.strip():
        return None
    out = {"stage": name.strip()[:120]}
    for key, value in list(obj.items())[:8]:
        if key != "stage" and isinstance(key, str) and len(key) <= 32 and isinstance(value, _SCALARS):
            out[key] = value[:200] if isinstance(value, str) else value
    return out


class ProgressChannel:
    def __init__(self, workdir: Path, on_stage: StageSink | None = None, relay: Relay | None = None):
        self.on_stage, self.relay = on_stage, relay
        self.paths = {name: workdir / f"{name}.fifo" for name in ("stages", "relay")}
        self.fds: dict[str, int] = {}
        self._buf = b""
        self.stages_seen = 0
        self.relay_error: str | None = None
        # an isolated child's own pid is its PID namespace's; the caller sets the one it kills and waits for
        self.outer_pid: int | None = None
        for name, path in self.paths.items():
            os.mkfifo(path, 0o600)
            self.fds[name] = os.open(path, os.O_RDWR | os.O_NONBLOCK)

    def request_fields(self) -> dict:
        return {f"{name}_fifo": str(path) for name, path in self.paths.items()}

    def wait(self, seconds: float) -> None:
        """Until the child writes something, or `seconds`: a relay request (the judge asking for the torch.compile
        baseline's time, every trial) is answered at once instead of at the next poll. With a fixed 20 ms poll every
        trial left the machine idle for ~10 ms while the judge waited, and on the 2-core VM an OpenMP region after an
        idle machine ran with both its threads on one vCPU: the candidate timed right after at one-thread speed."""
        fd = self.fds.get("stages")
        if fd is None:
            time.sleep(seconds)
            return
        try:
            select.select([fd], [], [], seconds)
        except (OSError, ValueError):
            time.sleep(seconds)

    def pump(self) -> None:
        """Read and handle whatever the child has written so far (non-blocking)."""
        while True:
            try:
                chunk = os.read(self.fds["stages"], 65536)
            except BlockingIOError:
                break
            except OSError:
                return
            if not chunk:
                break
            self._buf += chunk
            if len(self._buf) > MAX_BUFFER and b"\n" not in self._buf:
                self._buf = b""
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            self._handle(line)

    def _handle(self, line: bytes) -> None:
        try:
            obj = json.loads(line)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        if "relay" in obj:
            answer = {"error": "this evaluation has no relay"}
            if self.relay is not None and isinstance(obj["relay"], dict):
                try:
                    answer = self.relay(obj["relay"])
                except Exception as e:  # noqa: BLE001 - the child gets the error; the caller keeps supervising
                    answer = {"error": f"{type(e).__name__}: {e}"[:500]}
                    self.relay_error = self.relay_error or answer["error"]
            try:
                os.write(self.fds["relay"], (json.dumps(answer) + "\n").encode())
            except OSError:
                pass
            return
        stage = clean_stage(obj)
        if stage is not None and "pid" in stage and self.outer_pid is not None:
            stage["pid"] = self.outer_pid
        if stage is not None and self.on_stage is not None and self.stages_seen < MAX_STAGES:
            self.stages_seen += 1
            self.on_stage(stage)

    def close(self) -> None:
        if not self.fds:
            return
        self.pump()
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds.clear()
