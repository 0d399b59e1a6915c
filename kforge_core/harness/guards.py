"""Run-time guards that back the static rules inside the evaluation child.

Protected while candidate code runs ("untrusted" mode, the default once installed):
- starting programs (subprocess, os.system, exec*, fork, posix_spawn), sockets, ctypes.dlopen: an audit hook
  (PEP 578) raises, and the violation is recorded even if the candidate swallows the exception;
- opening anything under /proc other than /proc/self/{stat,status,maps}-style reads torch itself needs, and any
  file whose name looks like a secret store;
- starting Python threads (`_thread.start_new_thread`, wrapped since there is no audit event for it in 3.11);
- unpickling (`pickle.find_class`): a crafted pickle handed to a permitted loader calls arbitrary functions;
- state a candidate could leave behind to change how the reference or the harness computes: timers, every torch
  precision/autocast/default-device/determinism/thread setting, torch function and dispatch modes on the stack,
  global module hooks, and (by identity) every attribute of torch, its tensor and module classes, math, time,
  builtins and the harness's own modules. `snapshot_state()` is taken just before the candidate is imported;
  the evaluator compares after import, after every checked call (cheap variant during timing) and at the end.

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
                   "os.putenv", "os.kill", "os.killpg", "signal.pthread_kill",
                   # deserialising: a crafted pickle (np.load / torch.load on a fake file object) calls anything
                   "pickle.find_class")
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


@contextlib.contextmanager
def untrusted():
    """Candidate callables that our trusted code calls back (a Triton grid lambda) run guarded again."""
    saved = _state["trusted"]
    _state["trusted"] = 0
    try:
        yield
    finally:
        _state["trusted"] = saved


def snapshot_state(identities: bool = True) -> dict[str, object]:
    """Identities and values a candidate must not change: timers, synchronization, precision settings, global
    interception points, and (unless `identities=False`, the cheap per-call variant) every attribute of torch and
    of the harness by identity."""
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
    snap.update(_settings(torch))
    snap.update(_interposition(torch))
    if identities:
        snap.update(_identities(torch))
    return snap


_MISSING = object()


def _read(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a setting this torch build lacks is simply not compared
        return _MISSING


def _settings(torch) -> dict[str, object]:
    """Global numerics settings (values): precision of matmuls/convolutions on every backend, autocast, default
    device, determinism, threads. Left changed, they alter how the *reference* computes (precision drift)."""
    b = torch.backends
    reads = {
        "torch.backends.fp32_precision": lambda: b.fp32_precision,
        "cuda.matmul.fp32_precision": lambda: b.cuda.matmul.fp32_precision,
        "cuda.matmul.allow_fp16_reduced_precision_reduction":
            lambda: b.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction":
            lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "cudnn.enabled": lambda: b.cudnn.enabled, "cudnn.deterministic": lambda: b.cudnn.deterministic,
        "cudnn.fp32_precision": lambda: b.cudnn.fp32_precision,
        "cudnn.conv.fp32_precision": lambda: b.cudnn.conv.fp32_precision,
        "mkldnn.enabled": lambda: b.mkldnn.enabled, "mkldnn.fp32_precision": lambda: b.mkldnn.fp32_precision,
        "mkldnn.matmul.fp32_precision": lambda: b.mkldnn.matmul.fp32_precision,
        "mkldnn.conv.fp32_precision": lambda: b.mkldnn.conv.fp32_precision,
        "mkldnn.rnn.fp32_precision": lambda: b.mkldnn.rnn.fp32_precision,
        "mkldnn.allow_tf32": lambda: b.mkldnn.allow_tf32,
        "nnpack.enabled": lambda: b.nnpack.enabled, "mha.fastpath": lambda: b.mha.get_fastpath_enabled(),
        "autocast.cpu": lambda: torch.is_autocast_enabled("cpu"),
        "autocast.cuda": lambda: torch.is_autocast_enabled("cuda"),
        "autocast.cpu.dtype": lambda: torch.get_autocast_dtype("cpu"),
        "default_device": lambda: str(torch.get_default_device()),
        "deterministic_algorithms": lambda: torch.are_deterministic_algorithms_enabled(),
        "interop_threads": lambda: torch.get_num_interop_threads(),
    }
    return {k: v for k, v in ((k, _read(fn)) for k, fn in reads.items()) if v is not _MISSING}


def _interposition(torch) -> dict[str, object]:
    """Ways to intercept *every* torch call or module call, the reference's and the harness's included: torch
    function / dispatch modes left on the stack (a context entered in a suspended generator) and global module
    hooks (torch.nn.modules.module.register_module_forward_hook and friends)."""
    import torch.nn.modules.module as module_mod

    snap: dict[str, object] = {
        "torch function modes": _read(torch._C._len_torch_function_stack),
        "torch dispatch modes": _read(torch._C._len_torch_dispatch_stack),
    }
    for name, value in vars(module_mod).items():
        if name.startswith("_global_") and isinstance(value, dict):
            snap[f"global module hooks ({name})"] = len(value)
    return {k: v for k, v in snap.items() if v is not _MISSING}


_IDENTITY_MODULES = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special", "math", "time",
                     "builtins", "kforge_core.harness.compare", "kforge_core.harness.correctness",
                     "kforge_core.harness.timing", "kforge_core.harness.loading", "kforge_core.harness.launches",
                     "kforge_core.harness.run", "kforge_core.harness.guards", "kforge_core.harness.native",
                     "kforge_core.tolerance", "kforge_core.platform", "platforms._ctypes_kernels")


def _identities(torch) -> dict[str, object]:
    """Every attribute of torch, its tensor and module classes, math/time/builtins and the harness's own modules,
    by identity: whatever a candidate patches there (directly or through any alias) shows up as changed."""
    snap: dict[str, object] = {}
    spaces = [(name, sys.modules[name]) for name in _IDENTITY_MODULES if name in sys.modules]
    spaces += [("torch.Tensor", torch.Tensor), ("torch._C.TensorBase", torch._C.TensorBase),
               ("torch.nn.Module", torch.nn.Module), ("torch.nn.Parameter", torch.nn.Parameter)]
    for prefix, space in spaces:
        for name, value in vars(space).items():
            snap[f"id:{prefix}.{name}"] = value
    return snap


def changed_state(before: dict[str, object], identities: bool = True) -> list[str]:
    after = snapshot_state(identities)
    changed = []
    for k, v in before.items():
        if k.startswith("id:") and not identities:
            continue
        now = after.get(k, _MISSING)
        if k.startswith("id:"):
            if now is not v:
                changed.append(k[3:])
        elif now is not v and now != v:
            changed.append(k)
    return changed
