"""A fork server for evaluation children: imports torch, torch._dynamo and torch._inductor once, then forks one
child per evaluation. A child starts in ~50 ms instead of paying ~4 s of imports on a 2-core machine.

Safety: the zygote is started with the same scrubbed environment as any evaluation child (it holds no secrets),
never initialises a device (forking after CUDA initialisation is unsupported; importing torch does not initialise
it), and never runs candidate code itself. Each forked child gets a new session, resource limits, its private
working directory and a parent-death signal, exactly like a spawned child; it writes its framed result to
`result.out` in that directory and exits with os._exit.

Protocol on stdin/stdout, one JSON object per line:
  request  {"id", "workdir", "request": {...}, "memory_limit_mb", "limit_address_space"}
  reply    {"id", "pid"}                      (the child has been forked)
           {"pid", "status"}                  (a child exited; status as from os.waitpid)
"""

from __future__ import annotations

import json
import os
import signal
import sys

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


def _child(msg: dict) -> None:
    """In the forked child: become a sandboxed evaluation process, run, and never return."""
    import time

    started = time.perf_counter()
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        from ..sandbox import limits

        limits(msg.get("memory_limit_mb"), msg.get("limit_address_space", False))()
        workdir = msg["workdir"]
        os.chdir(workdir)
        os.environ["HOME"] = workdir
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(os.path.join(workdir, "child.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 2)
        result = os.open(os.path.join(workdir, "result.out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(result, 1)  # child.main keeps a private duplicate of fd 1 for the result and sends 1 to a log
        for fd in (null, log, result):
            os.close(fd)
        from .child import serve

        serve(msg["request"], started)
    finally:
        os._exit(70)


def main() -> None:
    from .child import scrub_sys_path

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
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # the reply must precede the exit report
        try:
            pid = os.fork()
            if pid == 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
                _child(msg)
            _write({"id": msg["id"], "pid": pid})
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    os._exit(0)


if __name__ == "__main__":
    main()
