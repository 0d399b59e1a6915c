"""A fork server for evaluation children: imports torch, torch._dynamo and torch._inductor once, then forks one
child per evaluation. A child starts in ~50 ms instead of paying ~4 s of imports on a 2-core machine.

Safety: the zygote is started with the same scrubbed environment as any evaluation child (it holds no secrets),
is not dumpable (no process of its user can read or write its memory through /proc or ptrace), never initialises a
device (forking after CUDA initialisation is unsupported; importing torch does not initialise it), and never runs
candidate code itself. Each forked child first enters its own namespaces and new root (`kforge_core.eval.isolation`,
when the caller sends a plan), then gets a new session, resource limits, its private working directory and a
parent-death signal, exactly like a spawned child; it writes its framed result to fd 1, a file the caller created
(`kforge_core.eval.channels`), and exits with os._exit.

Protocol: requests on stdin, a SOCK_SEQPACKET socket, one JSON object per message with three descriptors attached
(result, harness log, candidate log, and for an evaluation the build channel, `kforge_core.eval.build_service`); replies on stdout, one JSON object per line:
  request  {"id", "workdir", "request": {...}, "plan", "cgroup", "memory_limit_mb", "limit_address_space"} + fds
  reply    {"id", "pid"}                      (the child has been forked)
           {"pid", "status"}                  (a child exited; status as from os.waitpid)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

# result, harness log, candidate log; a build channel or, for a judge, a channel and a CPU probe per candidate's
# process (a head-to-head contest has up to 8)
MAX_FDS = 3 + 2 * 8
_PRELOAD = ("torch", "torch._dynamo", "torch._inductor.compile_fx", "torch.utils.cpp_extension",
            "torch.utils.flop_counter", "torch.profiler")


def _write(obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    os.write(1, data)  # one line below PIPE_BUF: atomic even when a signal handler writes too


def _reap(signum, frame) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _write({"pid": pid, "status": status})


def _child(msg: dict, fds: list[int]) -> None:
    """In the forked child: become a sandboxed evaluation process, run, and never return."""
    import time

    started = time.perf_counter()
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(0)  # the request socket: the server's, not the child's
        # fd 1 the result, 2 the harness log, 3 the candidate's output (child.serve keeps a private duplicate of
        # fd 1 for the result and moves fd 3 onto 1), 4 the build channel; all opened by the caller. First, so
        # that a failure to isolate is reported in the harness log
        moved = [os.dup(fd) for fd in fds]  # out of the way of 1..4, which they may occupy
        for target, fd in zip(range(1, len(moved) + 1), moved):
            os.dup2(fd, target, inheritable=True)
        for fd in {*fds, *moved} - set(range(len(moved) + 1)):
            os.close(fd)
        from ..isolation import drop_privileges
        from ..sandbox import limits

        limits(msg.get("memory_limit_mb"), msg.get("limit_address_space", False), entering=bool(msg.get("plan")),
               cgroup_procs=msg.get("cgroup"))()
        if msg.get("plan"):
            from ..isolation import enter

            enter(msg["plan"])  # from here on this is PID 1 of the evaluation's namespaces (the relay waits)
            drop_privileges()  # a new user namespace came with every capability in it
        workdir = msg["workdir"]
        os.chdir(workdir)
        os.environ["HOME"] = workdir
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        from .child import serve
    except BaseException as e:  # noqa: BLE001 - said in the harness log (the caller's verdict quotes it)
        os.write(2, f"evaluation child set-up failed: {type(e).__name__}: {e}\n".encode())
        os._exit(70)
    try:
        serve(msg["request"], started)
    finally:
        os._exit(70)


def main() -> None:
    import ctypes

    from .child import scrub_sys_path

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: its memory is every later evaluation's

    scrub_sys_path()  # its own directory too: sys.path is inherited by every child it forks (see child.serve)
    for name in _PRELOAD:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module only costs speed in the children
            pass
    import kforge_core.eval.harness.run  # noqa: F401 - the harness itself
    from kforge_core.platform import all_platforms

    all_platforms()  # import platform modules (no availability checks: those may initialise devices)
    signal.signal(signal.SIGCHLD, _reap)
    _write({"ready": True, "pid": os.getpid()})
    requests = socket.socket(fileno=0)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(requests, 1 << 20, MAX_FDS)
        except InterruptedError:
            continue
        if not data:
            break
        msg = json.loads(data)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # the reply must precede the exit report
        try:
            pid = os.fork()
            if pid == 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
                _child(msg, fds)
            _write({"id": msg["id"], "pid": pid})
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            for fd in fds:
                os.close(fd)
    os._exit(0)


if __name__ == "__main__":
    main()
