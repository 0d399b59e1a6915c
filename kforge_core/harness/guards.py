"""Run-time guards that back the static rules inside the evaluation child.

Protected while candidate code runs ("untrusted" mode, the default once installed):
- starting programs (subprocess, os.system, exec*, fork, posix_spawn), sockets, ctypes.dlopen: an audit hook
  (PEP 578) raises, and the violation is recorded even if the candidate swallows the exception;
- opening anything under /proc other than /proc/self/{stat,status,maps}-style reads torch itself needs, and any
  file whose name looks like a secret store;
- starting Python threads (`_thread.start_new_thread`, wrapped since there is no audit event for it in 3.11);
- timers and torch precision settings: snapshotted before the candidate is imported and compared afterwards.

Our own helpers (compilers, torch.compile for the baseline) run inside `trusted()`, which lifts the process and
thread guards. Not protected: a candidate's native code can still do anything its process can; the static rules
(`kforge_core.rules`) scan native source for OS calls, and the child runs with a scrubbed environment, a private
directory and resource limits, so the damage it can do is bounded to that.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import _thread

_state = {"installed": False, "trusted": 0}
violations: list[str] = []

_PROCESS_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                   "os.forkpty", "pty.spawn", "os.startfile", "socket.connect", "socket.bind", "socket.__new__",
                   "ctypes.dlopen", "ctypes.dlsym", "sys.setprofile", "sys.settrace", "sys.addaudithook",
                   "os.putenv", "os.kill", "os.killpg", "signal.pthread_kill")
_ALLOWED_PROC = ("/proc/self/stat", "/proc/self/status", "/proc/self/maps", "/proc/cpuinfo", "/proc/meminfo",
                 "/proc/self/cgroup", "/proc/self/mountinfo", "/proc/sys/", "/proc/stat")


class GuardViolation(RuntimeError):
    """Raised at the offending call; also recorded in `violations` so a swallowed one still rejects."""


def _violate(message: str) -> None:
    violations.append(message)
    raise GuardViolation(f"KForge sandbox: {message}")


def _hook(event: str, args: tuple) -> None:
    if _state["trusted"]:
        return
    if event.startswith(_PROCESS_EVENTS):
        _violate(f"{event} is not allowed in candidate code")
    if event == "open" and args:
        path = args[0]
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        if isinstance(path, str):
            if path.startswith("/proc") and not path.startswith(_ALLOWED_PROC):
                _violate(f"reading {path} is not allowed")
            if "environ" in path or path.endswith((".env", "settings.toml", ".netrc", "credentials")):
                _violate(f"opening {path} is not allowed")


def _guard_thread_start(original):
    def start_new_thread(*args, **kwargs):
        if not _state["trusted"]:
            _violate("starting a thread is not allowed in candidate code")
        return original(*args, **kwargs)

    return start_new_thread


def install() -> None:
    """Idempotent. Call after the harness's own imports, before any problem or candidate code runs."""
    if _state["installed"]:
        return
    _state["installed"] = True
    sys.addaudithook(_hook)
    guarded = _guard_thread_start(_thread.start_new_thread)
    _thread.start_new_thread = guarded
    threading._start_new_thread = guarded  # threading caches its own reference at import time


@contextlib.contextmanager
def trusted():
    """Our own code (compilers, baselines) may start processes and threads."""
    _state["trusted"] += 1
    try:
        yield
    finally:
        _state["trusted"] -= 1


def snapshot_state() -> dict[str, object]:
    """Identities and values a candidate must not change: timers, synchronization, precision settings."""
    import time

    import torch

    snap: dict[str, object] = {
        "time.perf_counter": time.perf_counter, "time.perf_counter_ns": time.perf_counter_ns,
        "time.time": time.time, "time.monotonic": time.monotonic,
        "torch.cuda.synchronize": torch.cuda.synchronize, "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.elapsed_time": getattr(torch.cuda.Event, "elapsed_time", None),
        "torch.cuda.Event.record": getattr(torch.cuda.Event, "record", None),
        "torch.nn.Module.__call__": torch.nn.Module.__call__,
        "torch.Tensor.clone": torch.Tensor.clone, "torch.allclose": torch.allclose,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "default_dtype": torch.get_default_dtype(),
        "threads": torch.get_num_threads(),
    }
    if hasattr(torch, "mps"):
        snap["torch.mps.synchronize"] = getattr(torch.mps, "synchronize", None)
    return snap


def changed_state(before: dict[str, object]) -> list[str]:
    after = snapshot_state()
    return [k for k, v in before.items() if after.get(k) is not v and after.get(k) != v]
