"""The torch.compile baseline, built once per run and kept warm (server side: `kforge_core.eval.harness.baseline_server`).

Before: every evaluation child compiled the problem again (10-18 s with inductor's caches warm, 85 s cold on the
2-core box). Now one baseline server per key -- problem digest, size class, target, device, torch version -- is
started as a run begins (`evaluator.prepare`, beside the agent's first generation) or else by the first evaluation
that needs it, and answers every later one. Interleaving is kept: the evaluation
child, at the compiled baseline's turn in a trial, sends a relay request through its progress channel; the caller
(this module's `BaselineRelay`) has the server time the baseline on that trial's inputs (made from the same seed)
and keeps the time itself, then lets the child go on. The child never sees the baseline's numbers.

A build is waited for lazily (`start` -> `Build`, in a thread of its own): an evaluation starts its children at once
and waits for the server only when its timing phase first asks for the baseline (the relay's "open"), so a candidate
that fails to build or is wrong on a seed gets its verdict while the build goes on for the next evaluation.

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


class BuildStopped(Exception):
    """The build this caller waited for was stopped by whoever started it (its cancel) or by `release`."""


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
                 cancel: Callable[[], bool] | None = None):
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
            if "stage" in msg:
                continue  # the server's own stages: its build is waited for lazily, under one stage of the caller's
            if "problem_error" in msg:
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
    can add or replace a sample). The times stay here; `summary()` gives them to the verdict.

    Lazily (`server` None, `open_server` given): the child's first request, "open" as its timing phase begins, waits
    here for the run's server (`open_server() -> (answer, server or None)`, called once) and is answered with how this
    evaluation gets its compiled baseline: {"compiled": "shared", "conditions"}, {"compiled": "unavailable",
    "reason"} or {"compiled": "local"} (compile it in the child). The answer never holds a time."""

    def __init__(self, server: BaselineServer | None = None,
                 open_server: Callable[[], tuple[dict, BaselineServer | None]] | None = None):
        self.server = server
        self._open_server = open_server
        self.answer: dict | None = {"compiled": "shared", "conditions": getattr(server, "conditions", None)} \
            if server is not None else None
        self.samples: list[float] = []
        self.warmups = 0

    def open(self) -> dict:
        if self.answer is None:
            if self._open_server is None:
                self.answer = {"compiled": "local"}
            else:
                self.answer, self.server = self._open_server()
        return self.answer

    def __call__(self, message: dict) -> dict:
        op, seed = message.get("op"), message.get("seed")
        if op == "open":
            return dict(self.open())
        if self.server is None:  # a timed request before "open" waits for the server all the same
            answer = self.open()
            if self.server is None:
                return {"error": str(answer.get("reason") or answer.get("error") or
                                     "no torch.compile baseline server for this evaluation")[:300]}
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
_lock = threading.Lock()  # guards _servers, _key_locks, _building and _builds; never held while a server starts
_key_locks: dict[str, threading.Lock] = {}  # one per key: a build of one problem's server blocks no other problem
_building: set[str] = set()  # keys whose server `get` is starting now (a caller about to wait for it can say so)
_builds: dict[str, Build] = {}  # keys whose server a `start` thread is getting now


def building(key: str) -> bool:
    with _lock:
        return key in _building or key in _builds


class Build:
    """One key's server on its way (or there): `start` returns it at once, `wait` gives the server when it is
    ready. Built in a thread of its own, so it goes on when the evaluation that started it has its verdict."""

    def __init__(self, key: str, origin: str, server: BaselineServer | None = None, owner: object = None):
        self.key, self.origin = key, origin  # origin: who started it, for the waiting stage ("the run started")
        self.owner = owner  # the object that started it (an evaluation's handle), where one did
        self.server = server
        self.failure: BaseException | None = None
        self.stopped = False  # set by `release` / `close_all`: the build stops at its next poll
        self._done = threading.Event()
        if server is not None:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, cancel: Callable[[], bool] | None = None, poll_s: float = 0.1) -> BaselineServer:
        """The server (its `error` / `problem_error` set where it cannot serve). Raises EvaluationCancelledDuringStart
        when `cancel()` turns True first (the build goes on), BuildStopped when the build was stopped, SandboxError
        when its server could not start."""
        while not self._done.wait(poll_s):
            if cancel is not None and cancel():
                raise EvaluationCancelledDuringStart()
        if isinstance(self.failure, (EvaluationCancelledDuringStart, BuildStopped)):
            raise BuildStopped()
        if self.failure is not None:
            raise self.failure
        assert self.server is not None
        return self.server


def start(key: str, make: Callable[[Callable[[], bool]], BaselineServer], cancel: Callable[[], bool] | None = None,
          origin: str = "", owner: object = None) -> Build:
    """`key`'s server, as a Build: done at once when its server is up (or known not to work), else the build under
    way, else a new one started in a thread: `make(stop)` with `stop()` True once `cancel()` (the starter's) is, or
    the build was released."""
    with _lock:
        server = _servers.get(key)
        if server is not None and not (server.dead and server.error is None and server.problem_error is None):
            _servers.move_to_end(key)
            return Build(key, origin, server)
        build = _builds.get(key)
        if build is not None and not build.stopped:
            return build
        # (a released build still stopping is left to end: this one waits for the key's lock meanwhile)
        build = _builds[key] = Build(key, origin, owner=owner)

    def stop() -> bool:
        return build.stopped or (cancel is not None and bool(cancel()))

    def run() -> None:
        server = failure = None
        try:
            server = get(key, lambda: _checked_make(make, stop))
        except BaseException as e:  # noqa: BLE001 - the waiters get it
            failure = e
        with _lock:
            if _builds.get(key) is build:
                del _builds[key]
        build.server, build.failure = server, failure
        build._done.set()

    threading.Thread(target=run, daemon=True, name=f"kforge-baseline-build-{key[:8]}").start()
    return build


def _checked_make(make, stop) -> BaselineServer:
    if stop():  # released (or cancelled) while it waited for the key: no process started for nothing
        raise BuildStopped()
    return make(stop)


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


def _stop_builds(keys=None) -> list[Build]:
    with _lock:
        builds = [b for k, b in _builds.items() if keys is None or k in keys]
    for b in builds:
        b.stopped = True
    return builds


def release(key: str) -> None:
    """Close `key`'s server; a build of it under way (`start`) is stopped and waited for; a start through `get` is
    waited for (stop it first: its `cancel`)."""
    for build in _stop_builds({key}):
        build._done.wait(30)
    with _key_lock(key):
        with _lock:
            server = _servers.pop(key, None)
    if server is not None:
        server.close()


def close_all() -> None:
    for build in _stop_builds():
        build._done.wait(30)
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
    for s in servers:
        s.close()


tempdirs.at_exit(close_all)  # the servers first (their logs are in their directories), then the directories
os.register_at_fork(after_in_child=lambda: (_servers.clear(), _builds.clear()))  # never the parent's in a forked child
