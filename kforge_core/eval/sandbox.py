"""Run the evaluation harness in a child process: timeout, memory limit, private directory, no secrets.

What the child gets:
- a fresh private working directory (removed afterwards) holding copies of the problem and the candidate;
- an environment built from an allow-list (PATH, locale, CUDA/ROCm/torch/Triton/OpenMP settings, ...) from which
  anything that looks like a credential (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*PASSWORD*`, `OPENAI_*`, ...) is removed;
- its own process group (killed whole on timeout, so compilers and stray grandchildren die too), a parent-death
  signal, no core dumps, RLIMIT_AS where the platform allows it, and RSS polling everywhere;
- a random nonce on stdin: the result is accepted only when framed by it, so candidate output cannot forge one.

The caller's own process is made non-dumpable once (PR_SET_DUMPABLE=0), which stops processes of the same
(non-root) user — the child included — from reading its /proc/<pid>/environ, where the API key lives.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import tempdirs
from ..errors import SandboxError
from . import channels, isolation
from .child_setup import PYTHON_FLAGS, child_environment, child_plan, isolation_status, nproc_limit, python_command
from .memory_use import session_memory_mb
from .redaction import redactor

_dumpable_cleared = False
RESULT_LIMIT = 1 << 26  # bytes read back at most: the framed result (profiles included)
LOG_LIMIT = 20000  # the tail of each log


def _clear_dumpable() -> None:
    global _dumpable_cleared
    if _dumpable_cleared or not sys.platform.startswith("linux"):
        return
    _dumpable_cleared = True
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def limits(memory_limit_mb: int | None, limit_address_space: bool, entering: bool = False,
           cgroup_procs: str | None = None):
    """`entering`: the child enters namespaces next, which a root child can only do holding CAP_SETFCAP (see
    isolation.enter); it keeps that one capability and drops it with the rest right after entering.
    `cgroup_procs`: the evaluation's pids cgroup (isolation.PidsCgroup), joined first."""
    def apply() -> None:  # runs in the child between fork and exec (or after a fork-server fork)
        import resource

        isolation.join_cgroup(cgroup_procs)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if memory_limit_mb and limit_address_space:
            n = memory_limit_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (n, n))
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the caller
            except (OSError, AttributeError):
                pass
        isolation.drop_privileges(keep=(isolation.CAP_SETFCAP,) if entering else ())

    return apply


_lasting: dict = {}
_lasting_lock = threading.Lock()


def popen_lasting(*args, **kwargs) -> subprocess.Popen:
    """subprocess.Popen from a thread that lives as long as this process. For servers that outlive the call that
    starts them (fork server, baseline server): their parent-death signal (PR_SET_PDEATHSIG) fires when the
    *thread* that forked them exits, so one started from an evaluation's worker thread would be killed when that
    thread ends."""
    import queue

    with _lasting_lock:
        if "thread" not in _lasting or not _lasting["thread"].is_alive():
            jobs: queue.Queue = queue.Queue()

            def serve() -> None:
                while True:
                    fn, box, done = jobs.get()
                    try:
                        box["value"] = fn()
                    except BaseException as e:  # noqa: BLE001 - handed back to the caller
                        box["error"] = e
                    done.set()

            _lasting["jobs"] = jobs
            _lasting["thread"] = threading.Thread(target=serve, daemon=True, name="kforge-server-starter")
            _lasting["thread"].start()
        jobs = _lasting["jobs"]
    box: dict = {}
    done = threading.Event()
    jobs.put((lambda: subprocess.Popen(*args, **kwargs), box, done))
    done.wait()
    if "error" in box:
        raise box["error"]
    return box["value"]


@dataclass
class ChildOutcome:
    result: dict | None  # the framed JSON result, when the child produced one
    returncode: int | None
    timed_out: bool
    memory_exceeded: bool
    log: str  # what the child printed (candidate output, tracebacks), secrets redacted
    wall_s: float
    isolation: str = ""  # "namespaces", or "none: <why>"
    cancelled: bool = False  # the caller asked to stop: the process group was killed, no verdict

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


def _kill_group(pid: int, group: isolation.PidsCgroup | None = None) -> None:
    """Kill the child's process group, and first the child's own children: with isolation that is the evaluation's
    PID 1 (whose death ends its namespace), which may have left the group (setsid) and dropped its parent-death
    signal; and everything in the evaluation's pids cgroup, where there is one."""
    if group is not None:
        group.kill_all()
    for child in _children(pid):
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


class Supervision:
    """What the caller does while a child runs, besides waiting: read its progress channel, and stop it when
    `cancel()` says so (checked every poll, so a cancel kills the process group within tens of milliseconds)."""

    def __init__(self, channel=None, cancel=None, grace=None):
        self.channel, self.cancel = channel, cancel
        self.grace = grace  # () -> seconds the caller kept the child waiting (the torch.compile baseline's build)
        self.cancelled = False

    def extra_s(self) -> float:
        """Seconds added to the child's time limit: what the caller made it wait for, not its own time."""
        return float(self.grace()) if self.grace is not None else 0.0

    def wait(self, seconds: float) -> None:
        """Sleep until the next poll, or until the child writes to its progress channel (answered at once)."""
        if self.channel is not None:
            self.channel.wait(seconds)
        else:
            time.sleep(seconds)

    def tick(self) -> bool:
        """False when the child must be stopped now."""
        if self.channel is not None:
            self.channel.pump()
        if self.cancel is not None and self.cancel():
            self.cancelled = True
            return False
        return True


def _supervise(pid: int, poll, start: float, timeout_s: float, memory_limit_mb: int | None,
               limit_address_space: bool, supervision: Supervision | None = None,
               group: isolation.PidsCgroup | None = None) -> tuple[bool, bool]:
    """Wait for the child; kill its whole process group on timeout, on memory overuse, on a cancel, or when the
    caller itself is interrupted (Ctrl-C must not leave an evaluation running). Returns (timed_out,
    memory_exceeded)."""
    timed_out = memory_exceeded = False
    next_rss = start + 0.5
    try:
        while poll() is None:
            now = time.monotonic()
            if now - start > timeout_s + (supervision.extra_s() if supervision is not None else 0.0):
                timed_out = True
                break
            if supervision is not None and not supervision.tick():
                break
            if memory_limit_mb and not limit_address_space and now >= next_rss:
                next_rss = now + 0.5
                if session_memory_mb(pid, within_mb=memory_limit_mb) > memory_limit_mb:
                    memory_exceeded = True
                    break
            (supervision.wait if supervision is not None else time.sleep)(0.02)
    except BaseException:
        _kill_group(pid, group)
        raise
    return timed_out, memory_exceeded


def _fork_server(isolated: bool, kind: str):
    """The fork server evaluations of this kind fork from (its key ignores HOME, the only part of the environment
    that names a workdir), started if needed."""
    from . import forkserver

    return forkserver.get(child_environment(Path(tempfile.gettempdir()), isolated), kind)


def prestart(target: str, memory_limit_mb: int | None, limit_address_space: bool) -> None:
    """Start the fork server that `target`'s evaluations fork from and pre-start its first children, as
    `run_child` would on its first call: a run calls this as it begins, so that its first evaluation does not
    wait for them. Raises SandboxError where the server cannot start (evaluations then spawn, as they would)."""
    from ..platform import get_platform
    from . import forkserver, warm_pool

    platform = get_platform(target)
    if not (platform.fork_server_safe and forkserver.enabled()):
        return
    isolated, _ = isolation_status()
    server = _fork_server(isolated, forkserver.kind_for({"target": platform.name}))
    if warm_pool.enabled():
        server.pool.prime(warm_pool.Spec.of(platform.name, memory_limit_mb, limit_address_space, isolated))


def run_child(request: dict, files: dict[str, str], *, timeout_s: float, memory_limit_mb: int | None,
              limit_address_space: bool, module: str = "kforge_core.eval.harness.child",
              fork_server_safe: bool = False, collect=None, on_stage=None, relay=None, cancel=None,
              peer=None, on_start=None, grace=None) -> ChildOutcome:
    """Run the evaluation harness (or `python -m module`) on `request` with `files` in a private directory.

    The harness child is forked from the fork server when the platform is fork-safe and a server is available
    (`kforge_core.eval.forkserver`), else spawned; both get the same environment, limits, privileges and isolation
    (`kforge_core.eval.isolation`). What comes back travels only through files this process created before the child
    started and reads by descriptor, size-bounded (`channels`); secrets known to KForge are redacted from it.
    A harness child gets a build channel to this process (`build_service`); `collect(workdir, result)` runs after
    the child has exited, before its directory is removed (the build service publishes a successful builder's
    output there).
    `on_stage(dict)` receives the stages the child reports, `relay(dict) -> dict` answers its relay requests (see
    `kforge_core.eval.progress_channel`: two FIFOs this process makes and opens in the private directory, which
    the isolated child sees at the same path), and `cancel()` returning True kills the child's process group (and
    its pids cgroup) at once (the outcome says `cancelled`). `peer` (a socket) is handed to the child as
    `peer_fd`: the channel between a judge and the candidate's process (`kforge_core.eval.judged`); a dict
    {request field: socket} hands over several (a contest's judge holds one per contender, and the CPU probe).
    `on_start(pid)` is told the pid this process started (the relay or launcher outside the child's namespaces,
    or the child itself without isolation), once it runs: the judge's CPU probe reads that process tree.
    `grace()` (seconds, read at every poll) is added to `timeout_s`: the time the caller kept the evaluation waiting
    for something not its own (the torch.compile baseline's build, waited for at the judge's first relay request)."""
    from . import forkserver, warm_pool
    from .build_service import BuildService
    from .progress_channel import ProgressChannel

    _clear_dumpable()
    isolated, why_not = isolation_status()
    server = slot = spec = pool = None
    kind = forkserver.kind_for(request)
    if fork_server_safe and module == "kforge_core.eval.harness.child" and forkserver.enabled():
        try:
            server = _fork_server(isolated, kind)
        except SandboxError:
            server = None  # spawning still works; only slower
    if server is not None and warm_pool.enabled() and request.get("mode") in warm_pool.POOLED_MODES:
        spec = warm_pool.Spec.of(request.get("target", ""), memory_limit_mb, limit_address_space, isolated)
        pool = server.pool
        slot = pool.take(spec)
    workdir = slot.workdir if slot else tempdirs.make("eval-")
    chans = channels.Channels()
    plan = None
    builds = None
    group = slot.group if slot else isolation.PidsCgroup.create(nproc_limit())
    channel = None
    try:
        for name, text in files.items():
            (workdir / name).write_text(text)
        nonce = secrets.token_hex(16)
        channel = ProgressChannel(workdir, on_stage, relay)
        supervision = Supervision(channel, cancel, grace)
        full_request = {**request, "nonce": nonce, "workdir": str(workdir), **channel.request_fields()}
        env = child_environment(workdir, isolated=isolated)
        plan = slot.plan if slot else (child_plan(workdir) if isolated else None)
        start = time.monotonic()
        fds = chans.fds()
        extra: dict[str, int] = {}  # request field -> the caller's descriptor, beyond result and logs
        peers = _peers(peer)
        judge = bool(peers) and request.get("mode") != "worker"  # a judge builds nothing
        if module == "kforge_core.eval.harness.child" and request.get("mode") not in ("build", "trace") and not judge:
            builds = BuildService(start + timeout_s, fork_server_safe, memory_limit_mb, limit_address_space, kind)
            extra["build_fd"] = builds.theirs.fileno()
        extra.update({name: sock.fileno() for name, sock in peers.items()})
        fds = (*fds, *extra.values())
        pid = None
        if server is not None:
            try:  # a forked child finds them at 4, 5, ... in this order
                numbered = {name: 4 + i for i, name in enumerate(extra)}
                pid = warm_pool.start(server, slot, {**full_request, "candidate_log_fd": 3, **numbered}, fds,
                                      workdir, memory_limit_mb, limit_address_space, plan, group)
            except SandboxError:
                server = None  # retired or gone meanwhile: this evaluation is spawned instead
        if server is not None:
            if builds:
                builds.child_started()
            _close_peers(peers)  # the child holds them now: when the child is gone, the other end sees EOF
            if on_start is not None:
                on_start(pid)
            if plan is not None:
                channel.outer_pid = pid
            timed_out, memory_exceeded = _supervise(pid, lambda: server.returncode(pid), start, timeout_s,
                                                    memory_limit_mb, limit_address_space, supervision, group)
            _kill_group(pid, group)  # the child, or whatever it left behind in its session
            returncode = server.wait(pid, 10.0)
            if timed_out or memory_exceeded:
                forkserver.retire(server)  # it ran away: the next evaluation gets a fresh server (and pool)
        else:
            returncode, timed_out, memory_exceeded = _spawn(workdir, {**full_request, **extra}, env, module, start,
                                                            timeout_s, memory_limit_mb, limit_address_space, fds,
                                                            plan, builds, group, supervision, peers, on_start)
        wall = time.monotonic() - start
        channel.close()
        redact = redactor()
        result = _unframe(chans.read("result", limit=RESULT_LIMIT), nonce)
        if collect is not None and not timed_out and not supervision.cancelled:
            collect(workdir, result)
        log = chans.read("harness", limit=LOG_LIMIT)
        cand_log = chans.read("candidate", limit=LOG_LIMIT)
        if cand_log:
            log = cand_log + ("\n" + log if log else "")
        if supervision.cancelled:
            result = None
        if result is not None:
            result = redact(result)
            if not isolated:
                result.setdefault("warnings", []).append(f"evaluated without OS isolation: {why_not}")
        return ChildOutcome(result, returncode, timed_out, memory_exceeded, redact(log), wall,
                            isolation="namespaces" if isolated else f"none: {why_not}",
                            cancelled=supervision.cancelled)
    finally:
        if slot is not None:
            slot.stop()  # if it was never handed its request (an error before): ended here
        if pool is not None:
            pool.refill(spec)  # after the timed calls, not beside them (a retired server's pool starts none)
        if channel is not None:
            channel.close()
        if group is not None:
            group.remove()
        chans.close()
        if builds is not None:
            builds.close()
        _close_peers(_peers(peer))
        shutil.rmtree(workdir, ignore_errors=True)
        if plan and plan.get("root"):
            try:
                os.rmdir(plan["root"])
            except OSError:
                pass


def _spawn(workdir: Path, request: dict, env: dict, module: str, start: float, timeout_s: float,
           memory_limit_mb: int | None, limit_address_space: bool, fds: tuple[int, ...],
           plan: dict | None, builds, group, supervision: Supervision | None = None,
           peers=None, on_start=None) -> tuple[int | None, bool, bool]:
    result_fd, log_fd, cand_fd, *extra = fds  # the request names the extra ones by their numbers here
    request = {**request, "candidate_log_fd": cand_fd}
    cmd = python_command(module)
    if plan is not None:  # the launcher enters the namespaces, then execs the child in them
        cmd = [sys.executable, "-S", *PYTHON_FLAGS, "-m", "kforge_core.eval.jail", json.dumps(plan), "--", *cmd]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=result_fd, stderr=log_fd, pass_fds=(cand_fd, *extra),
                                cwd=workdir, env=env, start_new_session=True,
                                preexec_fn=limits(memory_limit_mb, limit_address_space, entering=plan is not None,
                                                  cgroup_procs=group and group.procs))
    except OSError as e:
        raise SandboxError(f"could not start the evaluation process: {e}") from e
    if builds is not None:
        builds.child_started()
    _close_peers(peers or {})
    if on_start is not None:
        on_start(proc.pid)
    if plan is not None and supervision is not None and supervision.channel is not None:
        supervision.channel.outer_pid = proc.pid  # the jail launcher, whose death ends the evaluation's namespace
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    timed_out, memory_exceeded = _supervise(proc.pid, proc.poll, start, timeout_s, memory_limit_mb,
                                            limit_address_space, supervision, group)
    _kill_group(proc.pid, group)  # the child, or whatever it left behind in its group (a hung compiler, a daemon)
    proc.wait()
    return proc.returncode, timed_out, memory_exceeded


def _peers(peer) -> dict:
    """{request field: socket} from run_child's `peer` (one socket is the judge's `peer_fd`)."""
    if peer is None:
        return {}
    return dict(peer) if isinstance(peer, dict) else {"peer_fd": peer}


def _close_peers(peers: dict) -> None:
    for sock in peers.values():
        sock.close()


def _unframe(out: str, nonce: str) -> dict | None:
    start_tag, end_tag = f"<<{nonce}>>", f"<</{nonce}>>"
    i = out.rfind(start_tag)
    j = out.rfind(end_tag)
    if i < 0 or j < i:
        return None
    try:
        return json.loads(out[i + len(start_tag):j])
    except json.JSONDecodeError:
        return None
