"""A fork server for evaluation children: imports torch, torch._dynamo and torch._inductor once (and Triton, for a
GPU server: `--device cuda`), then forks one child per evaluation. A child starts in ~50 ms instead of paying ~4 s
of imports on a 2-core machine.

Safety: the zygote is started with the same scrubbed environment as any evaluation child (it holds no secrets),
is not dumpable (no process of its user can read or write its memory through /proc or ptrace), never initialises a
device, and never runs candidate code itself. A process that has called the CUDA driver's cuInit cannot hand CUDA
to a forked child, and torch.cuda.is_initialized() does not say whether that happened: torch.cuda.is_available()
(without PYTORCH_NVML_BASED_CUDA_CHECK=1) and torch.cuda.device_count() when NVML fails both reach
`torch._C._cuda_getDeviceCount`, i.e. cudaGetDeviceCount, i.e. cuInit. So `device_touched()` checks both torch's
flag and the driver itself (cuDeviceGetCount answers CUDA_ERROR_NOT_INITIALIZED until cuInit), after the preload and
before every fork: a zygote that touched the device refuses to start, and refuses every fork (the caller then spawns).
Forked children initialise the device themselves, after entering their namespaces. Each forked child first enters its own namespaces and new root (`kforge_core.eval.isolation`,
when the caller sends a plan), then gets a new session, resource limits, its private working directory and a
parent-death signal, exactly like a spawned child; it writes its framed result to fd 1, a file the caller created
(`kforge_core.eval.channels`), and exits with os._exit.

Pre-started children (`kforge_core.eval.warm_pool`): a request with "warm" (the target's name) and a single
descriptor, the child's end of a control socket pair the caller made, forks a child that sets itself up exactly as
below (limits, cgroup, namespaces, new root, no capabilities, its private directory) but before any request exists;
it then warms its device (`Platform.warm_child`: the CUDA context on GPU targets), says {"ready"} on the control
socket and waits. The caller hands it one request and the evaluation's descriptors over that socket (SCM_RIGHTS);
the child acknowledges {"ok"}, closes the control socket and serves that one request, then exits. EOF instead of a
request (the caller discarded it) ends it.

Protocol: requests on stdin, a SOCK_SEQPACKET socket, one JSON object per message with three descriptors attached
(result, harness log, candidate log, and for an evaluation the build channel, `kforge_core.eval.build_service`);
replies on stdout, one JSON object per line:
  request  {"id", "workdir", "request": {...}, "plan", "cgroup", "memory_limit_mb", "limit_address_space"} + fds
           {"id", "warm": target, "workdir", "plan", "cgroup", "memory_limit_mb", "limit_address_space"} + control
  reply    {"id", "pid"}                      (the child has been forked)
           {"id", "refused"}                  (not forked: the zygote's device state is not fork-safe)
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
_PRELOAD_GPU = ("triton", "triton.language")  # when installed; imported, never asked for its driver
CUDA_ERROR_NOT_INITIALIZED = 3


def _driver_initialised() -> bool:
    """Whether this process has called cuInit: libcuda must be loaded for that (RTLD_NOLOAD: never load it here), and
    cuDeviceGetCount answers CUDA_ERROR_NOT_INITIALIZED until then (it initialises nothing itself)."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
    except OSError:
        return False  # not even loaded
    count = ctypes.c_int(0)
    return lib.cuDeviceGetCount(ctypes.byref(count)) != CUDA_ERROR_NOT_INITIALIZED


def quiet_device_probes() -> None:
    """torch.cuda.is_available() during the preloads (torch._dynamo and inductor ask) then asks NVML, not
    cudaGetDeviceCount, which is cuInit. For every kind of server: the "cpu" one on a GPU machine had initialised the
    driver on import, refused to start (device_touched), and every trace and CPU child there was spawned instead
    (2.7 s each on the lent H200: a bench's built-in synthesis took 2.4 s a problem instead of 0.3)."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"


def device_touched() -> str | None:
    """Why forking from this process would hand a child a device it cannot use (None when it would not)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "torch.cuda is initialised in the fork server"
    if _driver_initialised():
        return "the CUDA driver was initialised (cuInit) in the fork server"
    return None


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


def _install_fds(fds: list[int]) -> None:
    """fd 1 the result, 2 the harness log, 3 the candidate's output (child.serve keeps a private duplicate of fd 1
    for the result and moves fd 3 onto 1), 4 the build channel, 5 the judge <-> candidate socket; all opened by the
    caller."""
    moved = [os.dup(fd) for fd in fds]  # out of the way of 1..5, which they may occupy
    for target, fd in zip(range(1, len(moved) + 1), moved):
        os.dup2(fd, target, inheritable=True)
    for fd in {*fds, *moved} - set(range(len(moved) + 1)):
        os.close(fd)


def _child(msg: dict, fds: list[int]) -> None:
    """In the forked child: become a sandboxed evaluation process, run, and never return."""
    import time

    started = time.perf_counter()
    control = None
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(0)  # the request socket: the server's, not the child's
        if msg.get("warm"):  # pre-started: no evaluation's descriptors yet; fd 1 (the server's replies) goes
            import fcntl

            # above the 1..5 its request's descriptors will take (dup2 there would close it silently)
            control = socket.socket(fileno=fcntl.fcntl(fds[0], fcntl.F_DUPFD_CLOEXEC, 16))
            os.close(fds[0])
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.close(null)
        else:  # first, so that a failure to isolate is reported in the harness log
            _install_fds(fds)
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

        request = msg.get("request")
        if control is not None:
            request = _wait_for_request(control, msg["warm"])
            started = time.perf_counter()
    except BaseException as e:  # noqa: BLE001 - said in the harness log (the caller's verdict quotes it)
        why = f"evaluation child set-up failed: {type(e).__name__}: {e}"
        if control is not None:
            _say(control, {"error": why})
        os.write(2, f"{why}\n".encode())
        os._exit(70)
    try:
        serve(request, started)
    finally:
        os._exit(70)


def _say(control: socket.socket, obj: dict) -> None:
    try:
        control.send(json.dumps(obj).encode())
    except OSError:
        pass


def _wait_for_request(control: socket.socket, target: str) -> dict:
    """A pre-started child, isolated and warmed: wait for the one request it will serve and its descriptors."""
    from kforge_core.platform import get_platform

    platform = get_platform(target)
    platform.warm_child()
    torch = sys.modules.get("torch")
    if platform.device_type == "cpu" or platform.device_type == "cuda" and torch is not None and \
            torch.cuda.is_initialized():  # warm_child made the context: this is the device the request will use
        from .compare import warm_up
        from .footprint import hold_long_lived

        try:
            hold_long_lived(platform)  # the judge's or the candidate's process's life-long buffers, while nobody waits
            warm_up(platform.device())  # and the checks' first calls (cuBLAS's handle, lazily loaded kernels)
        except Exception:  # noqa: BLE001 - made again, and failing there with its reason, when the request comes
            pass
    _say(control, {"ready": True})
    try:
        data, fds, _, _ = socket.recv_fds(control, 1 << 20, MAX_FDS)
    except ConnectionError:
        data, fds = b"", []
    if not data:  # discarded by the caller (pool retired, or the caller exits)
        os._exit(0)
    _install_fds(fds)
    _say(control, {"ok": True})
    control.close()  # nothing of the caller's stays reachable once candidate code can run
    return json.loads(data)


def main(argv: list[str]) -> None:
    import ctypes

    from .child import scrub_sys_path

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: its memory is every later evaluation's

    scrub_sys_path()  # its own directory too: sys.path is inherited by every child it forks (see child.serve)
    gpu = argv[1:2] == ["cuda"] if argv[:1] == ["--device"] else False
    quiet_device_probes()
    for name in _PRELOAD + (_PRELOAD_GPU if gpu else ()):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module only costs speed in the children
            pass
    import kforge_core.eval.harness.run  # noqa: F401 - the harness itself
    from kforge_core.platform import all_platforms

    all_platforms()  # import platform modules (no availability checks: those may initialise devices)
    touched = device_touched()
    if touched:  # refuse to serve at all: the caller falls back to spawning
        os.write(2, f"the fork server refuses to start: {touched} (forked children could not use the device)\n"
                    .encode())
        os._exit(3)
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
        touched = device_touched()
        if touched:  # something since the start touched the device: no child gets a half-usable CUDA
            _write({"id": msg["id"], "refused": touched})
            for fd in fds:
                os.close(fd)
            continue
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
    main(sys.argv[1:])
