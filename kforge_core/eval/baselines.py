"""The torch.compile baseline, built once per run and kept warm (server side: `kforge_core.eval.harness.baseline_server`).

Before: every evaluation child compiled the problem again (10-18 s with inductor's caches warm, 85 s cold on the
2-core box). Now one baseline server per key -- problem digest, size class, target, device, torch version -- is
started as a run begins (`evaluator.prepare`, beside the agent's first generation) or else by the first evaluation
that needs it, and answers every later one. Interleaving is kept: the evaluation
child, at the compiled baseline's turn in a trial, sends a relay request through its progress channel; the caller
(this module's `BaselineRelay`) has the server time the baseline on that trial's inputs (made from the same seed)
and keeps the time itself, then lets the child go on. The child never sees the baseline's numbers.

The eager baseline is timed where the reference lives: in the judge (`kforge_core.eval.judged`), a process that never
imports candidate code (in the one evaluation child when the split is off); building it (constructing `Model`)
costs milliseconds.

Servers live until `release(key)`, `close_all()`, or their caller exits (parent-death signal); at most
`MAX_SERVERS` are kept, the least recently used closed first. `KFORGE_SHARED_BASELINE=0` turns them off (every
child compiles its own baseline, as before).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from .. import tempdirs
from ..errors import SandboxError

MAX_SERVERS = 2
REQUEST_TIMEOUT_S = 120.0
stats = {"started": 0}  # servers started in this process (tests read it: "built once per run")


class EvaluationCancelledDuringStart(Exception):
    pass


def enabled() -> bool:
    return os.environ.get("KFORGE_SHARED_BASELINE", "1") not in ("0", "false", "no")


def torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "unknown"


def key_for(problem_source: str, size_class: str | None, target: str, device_name: str) -> str:
    text = json.dumps([hashlib.sha256(problem_source.encode()).hexdigest(), size_class, target, device_name,
                       torch_version()])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class BaselineServer:
    def __init__(self, key: str, problem_source: str, target: str, size_class: str | None, *,
                 memory_limit_mb: int | None, limit_address_space: bool, timeout_s: float,
                 on_stage: Callable[[dict], None] | None = None, cancel: Callable[[], bool] | None = None):
        from .child_setup import child_environment, python_command
        from .sandbox import limits, popen_lasting

        self.key = key
        self.lock = threading.Lock()
        self.dir = tempdirs.make("baseline-")
        (self.dir / "problem.py").write_text(problem_source)
        self.torch_compile_s: float | None = None
        self.error: str | None = None  # torch.compile failed for this problem: no compiled baseline
        self.problem_error: str | None = None
        self.conditions: dict | None = None  # what the server times under (harness/conditions.py)
        self.started_at = time.time()
        log = open(self.dir / "server.log", "wb")
        self.proc = popen_lasting(
            python_command("kforge_core.eval.harness.baseline_server"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log, cwd=self.dir, env=child_environment(self.dir), start_new_session=True,
            preexec_fn=limits(memory_limit_mb, limit_address_space))
        log.close()
        stats["started"] += 1
        self._lines: list[dict] = []
        self._cond = threading.Condition()
        self.dead = False
        threading.Thread(target=self._read, daemon=True, name=f"kforge-baseline-{key[:8]}").start()
        self._send({"workdir": str(self.dir), "target": target, "size_class": size_class})
        deadline = time.monotonic() + timeout_s
        while True:
            msg = self._next(min(0.1, max(0.0, deadline - time.monotonic())))
            if msg is None:
                if cancel is not None and cancel():
                    self.close()
                    raise EvaluationCancelledDuringStart()
                if self.dead or time.monotonic() > deadline:
                    tail = self.log_tail()
                    self.close()
                    raise SandboxError(f"the torch.compile baseline server did not start: {tail}")
                continue
            if "stage" in msg and on_stage is not None:
                from .progress_channel import clean_stage

                stage = clean_stage(msg)
                if stage:
                    on_stage(stage)
            elif "problem_error" in msg:
                self.problem_error = str(msg["problem_error"])
                self.close()
                return
            elif msg.get("ready"):
                self.error = msg.get("error")
                self.torch_compile_s = msg.get("torch_compile_s")
                self.conditions = msg.get("conditions")
                if self.error:
                    self.close()
                return

    @property
    def usable(self) -> bool:
        return not self.dead and self.error is None and self.problem_error is None

    def log_tail(self) -> str:
        try:
            return (self.dir / "server.log").read_text(errors="replace")[-500:]
        except OSError:
            return ""

    def _read(self) -> None:
        from .progress_channel import json_lines

        for msg in json_lines(self.proc.stdout):
            with self._cond:
                self._lines.append(msg)
                self._cond.notify_all()
        with self._cond:
            self.dead = True
            self._cond.notify_all()

    def _next(self, timeout: float) -> dict | None:
        with self._cond:
            self._cond.wait_for(lambda: self._lines or self.dead, timeout=timeout)
            return self._lines.pop(0) if self._lines else None

    def _send(self, obj: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as e:
            raise SandboxError(f"the torch.compile baseline server is gone: {e}") from e

    def request(self, op: str, seed: int, timeout_s: float = REQUEST_TIMEOUT_S) -> dict:
        with self.lock:
            self._send({"op": op, "seed": seed})
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                msg = self._next(deadline - time.monotonic())
                if msg is not None:
                    return msg
                if self.dead:
                    break
            raise SandboxError("the torch.compile baseline server did not answer")

    def close(self) -> None:
        from .sandbox import _kill_group

        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        _kill_group(self.proc.pid)  # its whole session: inductor's compile workers too
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.dead = True
        shutil.rmtree(self.dir, ignore_errors=True)


class BaselineRelay:
    """Answers one evaluation child's relay requests with the server: warm-up calls, then one timed call per trial,
    accepted only in order (trial 0, 1, 2, ...: a request out of order is refused, so nothing the candidate sends
    can add or replace a sample). The times stay here; `summary()` gives them to the verdict."""

    def __init__(self, server: BaselineServer):
        self.server = server
        self.samples: list[float] = []
        self.warmups = 0

    def __call__(self, message: dict) -> dict:
        op, seed = message.get("op"), message.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            return {"error": "a relay request needs an integer seed"}
        if op == "warm":
            if self.samples or self.warmups >= 16:
                return {"error": "warm-up requests come before the trials, at most 16"}
            self.warmups += 1
            answer = self.server.request("warm", seed)
            return {"ok": True} if answer.get("ok") else {"error": str(answer.get("error"))[:300]}
        if op == "time":
            if message.get("trial") != len(self.samples):
                return {"error": f"trial {message.get('trial')!r} out of order (expected {len(self.samples)})"}
            answer = self.server.request("time", seed)
            if not isinstance(answer.get("ms"), (int, float)):
                return {"error": str(answer.get("error"))[:300]}
            self.samples.append(float(answer["ms"]))
            return {"ok": True}
        return {"error": f"unknown relay op {op!r}"}

    def summary(self) -> dict | None:
        if not self.samples:
            return None
        s = self.samples
        return {"median_ms": statistics.median(s), "min_ms": min(s), "max_ms": max(s), "trials": len(s)}


_servers: OrderedDict[str, BaselineServer] = OrderedDict()
_lock = threading.Lock()  # guards _servers, _key_locks and _building; never held while a server starts
_key_locks: dict[str, threading.Lock] = {}  # one per key: a build of one problem's server blocks no other problem
_building: set[str] = set()  # keys whose server `get` is starting now (a caller about to wait for it can say so)


def building(key: str) -> bool:
    with _lock:
        return key in _building


def _key_lock(key: str) -> threading.Lock:
    with _lock:
        return _key_locks.setdefault(key, threading.Lock())


def get(key: str, make: Callable[[], BaselineServer]) -> BaselineServer:
    """The server for `key`, started with `make()` if there is none (or it died). A caller asking for a key whose
    server is being started waits for that start (and gets its server) instead of starting another."""
    with _key_lock(key):
        with _lock:
            server = _servers.get(key)
            if server is not None and server.dead and server.error is None and server.problem_error is None:
                _servers.pop(key)
                server = None
            if server is not None:
                _servers.move_to_end(key)
                return server
            _building.add(key)
        try:
            server = make()
        finally:
            with _lock:
                _building.discard(key)
        with _lock:
            _servers[key] = server
            evicted = []
            while len(_servers) > MAX_SERVERS:
                evicted.append(_servers.popitem(last=False)[1])
    for old in evicted:
        old.close()
    return server


def release(key: str) -> None:
    """Close `key`'s server; a start of it under way is waited for (stop it first: its `cancel`)."""
    with _key_lock(key):
        with _lock:
            server = _servers.pop(key, None)
    if server is not None:
        server.close()


def close_all() -> None:
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for s in servers:
        s.close()


tempdirs.at_exit(close_all)  # the servers first (their logs are in their directories), then the directories
os.register_at_fork(after_in_child=_servers.clear)  # the parent's servers: never closed by a forked child
