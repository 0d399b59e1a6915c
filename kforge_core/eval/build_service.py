"""The caller's build service: evaluation children ask, a trusted process publishes (`kforge_core.build_cache`).

Caller side (`BuildService`): a SOCK_SEQPACKET socket pair made before the child starts; the child gets one end
(`build_fd`), a thread here answers. A request names a registered platform builder and its JSON arguments; the
answer is the published directory, or the compile error. A miss is built in a fresh evaluation child in "build"
mode (`serve_build`, same sandbox and isolation, no candidate code, its own private directory), and what that child
produced is published from here: hashed, regular files only, read by descriptor. Requests are handled one at a
time per evaluation, each bounded by the evaluation's remaining time.

Child side (`connect`): installs the channel `cached_build` uses on a miss.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from .. import build_cache
from ..errors import CompileError

MAX_REQUEST = 1 << 22  # sources and flags of one build


class _Rejected(Exception):
    """A build the native vetting refused (in the build child): the evaluation child turns it into a violation."""


class BuildService:
    def __init__(self, deadline: float, fork_server_safe: bool, memory_limit_mb: int | None,
                 limit_address_space: bool, device_kind: str = "cpu"):
        self._ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.theirs.set_inheritable(True)
        self._deadline = deadline
        self._device_kind = device_kind  # the evaluation's fork server forks its builds too
        self._opts = {"fork_server_safe": fork_server_safe, "memory_limit_mb": memory_limit_mb,
                      "limit_address_space": limit_address_space}
        self._thread = threading.Thread(target=self._serve, daemon=True, name="kforge-build-service")
        self._thread.start()

    def child_started(self) -> None:
        """The child holds its end now: ours closes, so the service sees EOF when the child is gone."""
        self.theirs.close()

    def close(self) -> None:
        try:
            self.theirs.close()
        except OSError:
            pass
        try:
            self._ours.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout=5)
        self._ours.close()

    def _serve(self) -> None:
        while True:
            try:
                data = self._ours.recv(MAX_REQUEST)
            except OSError:
                return
            if not data:
                return
            try:
                reply = self._handle(json.loads(data))
            except CompileError as e:
                reply = {"error": str(e), "log": e.log}
            except _Rejected as e:
                reply = {"rejected": str(e)}
            except Exception as e:  # noqa: BLE001 - the child gets an error, never a hang
                reply = {"error": f"the build service failed: {type(e).__name__}: {e}"}
            try:
                self._ours.send(json.dumps(reply).encode())
            except OSError:
                return

    def _handle(self, msg: dict) -> dict:
        platform, args = msg.get("platform"), msg.get("args")
        if platform not in build_cache.BUILDERS or not isinstance(args, dict):
            raise CompileError(f"no builder for {platform!r}")
        key = build_cache.key_for(platform, args)
        found = build_cache.lookup(platform, key)
        if found is None:
            found = self._build(platform, key, args)
        return {"path": str(found)}

    def _build(self, platform: str, key: str, args: dict) -> Path:
        from .sandbox import run_child

        published: list[Path] = []

        def collect(workdir: Path, result: dict | None) -> None:
            # only a build that succeeded is published: what a failed one left in its output (the source, a
            # dependency file) is not a build, and a later evaluation of the same source must fail the same way
            out = workdir / "out"
            if isinstance(result, dict) and result.get("ok") is True and out.is_dir() and not out.is_symlink():
                published.append(build_cache.publish(platform, key, out))

        remaining = self._deadline - time.monotonic()
        if remaining <= 1:
            raise CompileError("no time left in the evaluation for this build")
        outcome = run_child({"mode": "build", "platform": platform, "args": args, "device_kind": self._device_kind},
                            {}, timeout_s=remaining, collect=collect, **self._opts)
        return self._checked(outcome, published)

    @staticmethod
    def _checked(outcome, published: list[Path]) -> Path:
        r = outcome.result
        if outcome.timed_out:
            raise CompileError("the build did not finish within the evaluation's time limit")
        if r is None:
            raise CompileError(f"the build process died (exit {outcome.returncode})", log=outcome.log[-4000:])
        if r.get("rejected"):
            raise _Rejected(r["rejected"])
        if not r.get("ok"):
            raise CompileError(r.get("error") or "the build failed", log=r.get("log") or "")
        if not published:
            raise CompileError("the build produced nothing")
        return published[0]


def serve_build(request: dict, workdir: Path) -> dict:
    """In a build-mode child: run the registered builder into workdir/out; the caller publishes it."""
    out = workdir / "out"
    out.mkdir()
    from .harness.guards import GuardViolation

    try:
        build_cache.run_builder(request["platform"], out, request["args"])
    except CompileError as e:
        return {"ok": False, "error": str(e), "log": e.log}
    except GuardViolation as e:  # refused by the native vetting: the evaluation's verdict is `rejected`
        return {"ok": False, "rejected": str(e).removeprefix("KForge sandbox: ")}
    return {"ok": True}


def connect(fd: int) -> None:
    """In an evaluation child: send build misses to the caller over `fd`."""
    sock = socket.socket(fileno=fd)
    lock = threading.Lock()

    def channel(platform: str, args: dict) -> Path:
        with lock:
            sock.send(json.dumps({"platform": platform, "args": args}, default=str).encode())
            data = sock.recv(1 << 24)
        reply = json.loads(data) if data else {"error": "the build service is gone"}
        if "rejected" in reply:
            from .harness import guards

            guards._violate(str(reply["rejected"]))  # recorded, so a swallowed refusal still rejects
        if "path" not in reply:
            raise CompileError(reply.get("error", "the build failed"), log=reply.get("log") or "")
        path = Path(reply["path"])
        key = build_cache.key_for(platform, args)
        if path != build_cache.cache_root() / platform / key or build_cache.lookup(platform, key) is None:
            raise CompileError("the published build does not match its index entry")
        return path

    build_cache._channel = channel
    os.set_inheritable(fd, False)
