"""The child's side of the progress channel: stage lines to the caller, and the relay (a request the caller answers).

Two FIFOs the caller made in the private directory and opened before the child started (`kforge_core.eval.sandbox`):
`stages` (child -> caller, one JSON object per line) and `relay` (caller -> child). The child opens both at start,
before any problem or candidate code runs, and keeps the descriptors; the caller reads only what it opened.

What travels here is progress, never a verdict: a stage name for the UI ("checking seed 3/5"), and a relay request
that asks the caller to time the run's warm torch.compile baseline on trial k's inputs (`kforge_core.eval.baselines`).
The caller keeps those times itself; the child never sees them, so nothing sent here can change a number the
verdict reports. Candidate code shares the process and can write lines too: the caller treats every line as
untrusted (bounded, parsed defensively, relay requests accepted only in order).
"""

from __future__ import annotations

import json
import os
import select
import time

_fds = {"stages": None, "relay": None}
_started = time.perf_counter()
STAGE_WRITE_WAIT_S = 1.0  # a stage line the caller does not take within this is dropped (progress is best effort)


def open_channel(request: dict) -> None:
    """Open the FIFOs named in the request (absent: progress goes nowhere, relay requests fail)."""
    global _started
    _started = time.perf_counter()
    for name in ("stages", "relay"):
        path = request.get(f"{name}_fifo")
        if path and _fds[name] is None:
            try:
                _fds[name] = os.open(path, os.O_WRONLY if name == "stages" else os.O_RDONLY)
            except OSError:
                _fds[name] = None


def _write_line(obj: dict, wait_s: float | None) -> bool:
    fd = _fds["stages"]
    if fd is None:
        return False
    data = (json.dumps(obj, default=str) + "\n").encode()
    if len(data) > 4096:  # PIPE_BUF: a longer line could interleave with another writer's
        return False
    _, ready, _ = select.select([], [fd], [], wait_s)
    if not ready:
        return False
    try:
        os.write(fd, data)
    except OSError:
        return False
    return True


def stage(name: str, **detail) -> None:
    """Report the stage the evaluation has reached (shown live; best effort)."""
    _write_line({"stage": name, "t": round(time.perf_counter() - _started, 3), **detail}, STAGE_WRITE_WAIT_S)


def relay_available() -> bool:
    return _fds["stages"] is not None and _fds["relay"] is not None


class RelayError(RuntimeError):
    pass


def relay(message: dict, timeout_s: float = 120.0) -> dict:
    """Send `message` to the caller and wait for its one-line answer."""
    if not relay_available():
        raise RelayError("no relay channel to the caller")
    if not _write_line({"relay": message}, timeout_s):
        raise RelayError("the caller did not take the relay request")
    fd, buf, deadline = _fds["relay"], b"", time.monotonic() + timeout_s
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        if not ready:
            raise RelayError(f"no answer from the caller within {timeout_s:g} s")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise RelayError("the caller closed the relay channel")
        buf += chunk
    try:
        answer = json.loads(buf)
    except ValueError as e:
        raise RelayError(f"unreadable relay answer: {e}") from None
    if not isinstance(answer, dict):
        raise RelayError("unreadable relay answer")
    return answer
