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
  builtins and the harness's own modules (read by `kforge_core.eval.harness.process_state`). `snapshot_state()`
  is taken just before the candidate is imported; the evaluator compares (`changed_state()`) after import, after
  every checked call (cheap variant during timing) and at the end.

Our own helpers (compilers, torch.compile for the baseline) run inside `trusted()`, which lifts the process and
thread guards. The import-time code of installed libraries is trusted the same way (see "imports of installed
libraries" below): a candidate's first call of a public torch API may import a torch submodule lazily, and that
module's own top-level code may do what candidate code may not (importing torch._dynamo sets os.environ).

Not protected: a candidate's native code can still do anything its process can; the static rules
(`kforge_core.eval.rules`) scan native source for OS calls, and the child runs with a scrubbed environment, a private
directory and resource limits, so the damage it can do is bounded to that.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib._bootstrap as _bootstrap
import importlib._bootstrap_external as _external
import marshal
import os
import sys
import threading
import types
import _imp
import _io
import _thread

from . import process_state
# the ops the reference and the comparison ran, and their recorder: callers reach them through this module
from .process_state import record_ops, reference_ops, watched_ops  # noqa: F401

_MISSING = object()

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


def _refusal(event: str, args: tuple) -> str | None:
    if event.startswith(_PROCESS_EVENTS):
        return f"{event} is not allowed in candidate code"
    if event == "open" and args:
        path = args[0]
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        if isinstance(path, str):
            if path.startswith("/proc") and not path.startswith(_ALLOWED_PROC):
                return f"reading {path} is not allowed"
            if "environ" in path or path.endswith((".env", "settings.toml", ".netrc", "credentials")):
                return f"opening {path} is not allowed"
    return None


def _hook(event: str, args: tuple) -> None:
    if _state["trusted"]:
        return
    refused = _refusal(event, args)
    # the stack is only walked for an event that would be refused: rare, so the hook stays cheap for the rest
    if refused is not None and not _in_trusted_import(sys._getframe(1)):
        _violate(refused)


def _guard_thread_start(original):
    def start_new_thread(*args, **kwargs):
        if not _state["trusted"] and not _in_trusted_import(sys._getframe(1)):
            _violate("starting a thread is not allowed in candidate code")
        return original(*args, **kwargs)

    return start_new_thread


# ------------------------------------------------------------------------------ imports of installed libraries
#
# The bug this fixes: a legitimate candidate's first call of a public torch API can import a module lazily, and
# that module's top-level code ran guarded, as candidate code. `torch.utils.checkpoint.checkpoint`,
# `torch.compiler.disable`, `torch.func.grad` (everything wrapped by `torch._disable_dynamo`) import torch._dynamo
# on first use; its module torch/_dynamo/package.py calls torch/_inductor/runtime/cache_dir_utils.py:cache_dir(),
# which sets os.environ["TORCHINDUCTOR_CACHE_DIR"]: audit event `os.putenv`, refused. (The fork server preloads
# torch._dynamo, so only spawned children hit it: KFORGE_EVAL_SPAWN=1, or any platform without a fork server, e.g.
# macOS. torch.broadcast_shapes imports sympy lazily, which fires import/open/marshal.loads/exec/compile events,
# none of them refused.)
#
# The fix: an event that would be refused is allowed when it comes from the import-time code of a module loaded from
# a trusted location (the Python installation, site-packages, the torch install, our own packages; resolved with
# realpath; never the candidate's working directory, HOME or the caches). Two conditions, both checked on the
# stack of the thread that raised the event, at the moment it is raised (no global "import in progress" flag that
# another thread, an exception or a re-entrant import could leave stale):
#   1. an anchor: `importlib._bootstrap._load_unlocked`, the one place every import statement, `__import__` and
#      `importlib.import_module` goes through to create and execute a module it has found, is wrapped; the wrapper
#      checks the module's spec (exact stdlib loader class, no instance attributes shadowing its methods, source
#      and cached bytecode files in a trusted location, import machinery not tampered with) and, only when it
#      passes, runs the import through `_load_trusted`, whose frame is the anchor;
#   2. a clean chain: every Python frame between the event and the innermost anchor is code of a trusted module
#      (frame globals are the dict of a module in sys.modules loaded from a trusted location, and a real file name
#      is a trusted file). A candidate function called back during the import (a lambda, a method, a callback
#      stored in a library) puts its own frame on that chain, so the event stays refused.
# Why not the "import" audit event or builtins.__import__: the event says an import starts, but neither which file
# will be loaded nor when it ends; `__import__` is skipped by `importlib.import_module` and by C callers. The
# wrapped `_load_unlocked` sees the resolved spec and its frame marks exactly the extent of the import.
# What a candidate cannot do with it: write a module (.py or .pyc) into its directory, HOME, a cache or a sys.path
# entry of its own and import it, or get one imported lazily in place of a library (its spec and frames are
# untrusted); drive importlib on crafted data (crafted loaders fail the spec check, and calling the machinery
# directly has the candidate's frame on the chain); call pickle/marshal/subprocess itself (its frame is on the
# chain). Not covered: a candidate able to write into the Python installation itself (a file system permission
# matter); code that runs the stdlib loaders by hand (module_from_spec + exec_module) is not anchored, so it stays
# guarded as before. Like the rest of this module, it assumes candidate code cannot reflect freely: code that can
# exec with a library module's globals under a library's file name makes frames that look trusted, but such code
# could as well raise `_state["trusted"]` itself.

_FILE_LOADERS = (_external.SourceFileLoader, _external.SourcelessFileLoader, _external.ExtensionFileLoader)
_BUILTIN_LOADERS = (_bootstrap.BuiltinImporter, _bootstrap.FrozenImporter)
_original_load_unlocked = getattr(_bootstrap, "_load_unlocked", None)
_trust: dict[str, object] = {"roots": (), "excluded": (), "paths": {}, "machinery": (), "depth": 0,
                             "tainted": False}
# identity keys a trusted import rebound by wrapping the previous value (torch/_dynamo/__init__.py does
# `torch.manual_seed = torch._disable_dynamo(torch.manual_seed)`): key -> [(old, new), ...]; `changed_state` accepts
# exactly these chains, so a lazy import of torch._dynamo is not reported as the candidate patching torch
_import_rebinds: dict[str, list[tuple[object, object]]] = {}


def _realpath(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _under(path: str, roots) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def _trusted_path(path) -> bool:
    """A file in the Python installation / site-packages / torch / our own packages, outside the candidate's
    writable places. Cached by name (the resolution of a path inside those trees does not change mid-run)."""
    if not isinstance(path, str) or not path or path.startswith("<"):
        return False
    cache = _trust["paths"]
    found = cache.get(path)
    if found is None:
        real = _realpath(path)
        found = cache[path] = _under(real, _trust["roots"]) and not _under(real, _trust["excluded"])
    return found


def _trusted_module(module) -> bool:
    spec = getattr(module, "__spec__", None)
    loader = getattr(spec, "loader", None)
    if loader in _BUILTIN_LOADERS:
        return True  # compiled into the interpreter (frozen: os, importlib._bootstrap, ...)
    return type(loader) in _FILE_LOADERS and _trusted_path(getattr(spec, "origin", None))


def _trusted_frame(frame) -> bool:
    g = frame.f_globals
    name = g.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    if module is None or getattr(module, "__dict__", None) is not g or not _trusted_module(module):
        return False
    filename = frame.f_code.co_filename
    # "<frozen os>", or code a trusted module generated with exec (dataclass methods): judged by its module
    return filename.startswith("<") or _trusted_path(filename)


def _machinery_intact() -> bool:
    """The functions and classes the stdlib loaders read, unmarshal and execute a module with are the ones seen at
    install: replaced, they could hand crafted code to a trusted spec without being on the stack when it runs."""
    return all(space.get(key, _MISSING) is value for space, key, value in _trust["machinery"])


def _trusted_spec(spec) -> bool:
    loader = getattr(spec, "loader", None)
    if loader in _BUILTIN_LOADERS:
        return _machinery_intact()
    if type(loader) not in _FILE_LOADERS:  # exact classes: a subclass could override get_data / get_code
        return False
    if set(vars(loader)) - {"name", "path"}:  # instance attributes would shadow the methods
        return False
    path = loader.path
    if loader.name != getattr(spec, "name", None) or not _trusted_path(path):
        return False
    if type(loader) is _external.SourceFileLoader:
        try:  # the .pyc it will unmarshal (sys.pycache_prefix and the cache tag are the candidate's to change)
            if not _trusted_path(_external.cache_from_source(path)):
                return False
        except Exception:  # noqa: BLE001 - no cache path: it compiles the (trusted) source
            pass
    return _machinery_intact()


def _load_trusted(spec):
    """The anchor: its frame on the stack marks the import of a module whose spec passed `_trusted_spec`. The
    outermost one also notes which watched identities its import rebound (see `_import_rebinds`)."""
    torch = sys.modules.get("torch")
    # inside trusted() the harness takes a new snapshot itself after its own work (run.py)
    outermost = _trust["depth"] == 0 and torch is not None and not _state["trusted"]
    before = process_state.identities_of(torch) if outermost else None
    if before is not None:
        _trust["tainted"] = False
    _trust["depth"] += 1
    try:
        return _original_load_unlocked(spec)
    finally:
        _trust["depth"] -= 1
        if before is not None and not _trust["tainted"]:
            _note_rebinds(before, process_state.identities_of(torch))


def _load_unlocked(spec):
    if _state["installed"] and _trusted_spec(spec):
        return _load_trusted(spec)
    if _trust["depth"]:
        _trust["tainted"] = True  # untrusted code ran inside a trusted import: none of its rebinds are accepted
    return _original_load_unlocked(spec)


def _note_rebinds(before: dict[str, object], after: dict[str, object]) -> None:
    for key, old in before.items():
        new = after.get(key, _MISSING)
        if new is not old and _wraps(new, old):
            _import_rebinds.setdefault(key, []).append((old, new))


def _wraps(new, old) -> bool:
    """`new` is a decorator's wrapper of `old` (functools.wraps), defined in a trusted file."""
    return (isinstance(new, types.FunctionType) and vars(new).get("__wrapped__") is old
            and _trusted_path(new.__code__.co_filename))


def _rebound_by_import(key: str, old, now) -> bool:
    """`now` is reached from `old` through rebinds made by trusted imports only."""
    pairs = _import_rebinds.get(key, ())
    for _ in pairs:  # bounded: a chain is at most as long as the list
        old = next((n for o, n in pairs if o is old), _MISSING)
        if old is _MISSING:
            return False
        if old is now:
            return True
    return False


_ANCHOR_CODE, _WRAPPER_CODE = _load_trusted.__code__, _load_unlocked.__code__


def _in_trusted_import(frame) -> bool:
    """True when every frame from `frame` up to the innermost `_load_trusted` is trusted module code."""
    while frame is not None:
        code = frame.f_code
        if code is _ANCHOR_CODE:
            return True
        if code is _WRAPPER_CODE:  # an import whose spec failed the check: nothing above it can vouch for it
            return False
        if not _trusted_frame(frame):
            return False
        frame = frame.f_back
    return False


def _trust_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths = sysconfig.get_paths()
    roots.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k))
    try:
        import site

        roots.update(site.getsitepackages())
    except Exception:  # noqa: BLE001 - a virtualenv's old site module may lack it
        pass
    for name in ("torch", "kforge_core", "platforms"):  # torch's install, and our own packages
        module = sys.modules.get(name)
        for entry in list(getattr(module, "__path__", None) or ()):
            roots.add(os.path.dirname(entry) if name == "torch" else entry)
    # where the candidate can write: its directory (the cwd), HOME, the caches (builds, inductor, Triton)
    excluded = {os.getcwd(), *(os.environ.get(k) for k in ("HOME", "KFORGE_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                                                           "TRITON_CACHE_DIR", "XDG_CACHE_HOME"))}
    roots = {_realpath(r) for r in roots if r} - {os.sep}
    # an excluded directory matters where it lies inside a trusted root (a working directory under sys.prefix); one
    # that holds a root (HOME=/root, Python in /root/.pyenv) excludes nothing the roots did not already leave out
    excluded = {_realpath(e) for e in excluded if e}
    excluded = {e for e in excluded if not any(_under(r, (e,)) for r in roots)}
    return tuple(sorted(roots)), tuple(sorted(excluded))


def _machinery_snapshot() -> tuple:
    entries = []
    spaces = [vars(_bootstrap), vars(_external), vars(marshal), vars(_io), vars(_imp)]
    for cls in _FILE_LOADERS + _BUILTIN_LOADERS:
        spaces += [vars(c) for c in cls.__mro__ if c is not object]
    for space in spaces:
        for key, value in list(space.items()):
            if key == "_load_unlocked" or not callable(value) and not isinstance(value, type(sys)):
                continue
            entries.append((space, key, value))
    entries += [(vars(builtins), "exec", builtins.exec), (vars(builtins), "compile", builtins.compile),
                (vars(sys), "modules", sys.modules)]
    return tuple(entries)


def _install_import_trust() -> None:
    if _original_load_unlocked is None:  # an interpreter without it: lazy imports stay guarded, as before
        return
    roots, excluded = _trust_roots()
    _trust.update(roots=roots, excluded=excluded, paths={})
    _bootstrap._load_unlocked = _load_unlocked
    _trust["machinery"] = _machinery_snapshot() + ((vars(_bootstrap), "_load_unlocked", _load_unlocked),)


DISARM_VARIABLE = "KFORGE_UNSAFE_DISARM"


def disarmed() -> bool:
    """Tests of the judge only: no static rules, no guards, so a hostile candidate reaches whatever its process
    holds, as one that got past them would. The judge stays what it is (it never runs candidate code); every
    verdict says so."""
    return os.environ.get(DISARM_VARIABLE, "") == "1"


def install() -> None:
    """Idempotent. Call after the harness's own imports, before any problem or candidate code runs."""
    if _state["installed"] or disarmed():
        return
    _install_import_trust()
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



def snapshot_state(identities: bool = True, registrations: bool | None = None) -> dict[str, object]:
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
    snap.update(process_state.settings(torch))
    snap.update(process_state.interposition(torch))
    with trusted():  # our own reads (/proc/self/timers), no candidate code
        snap.update(process_state.native_state())
    if identities:
        snap.update(process_state.identities_of(torch))
        snap.update(process_state.dispatcher(torch, identities if registrations is None else registrations))
    return snap


def changed_state(before: dict[str, object], identities: bool = True, registrations: bool | None = None) -> list[str]:
    registrations = identities if registrations is None else registrations
    after = snapshot_state(identities, registrations)
    changed = []
    for k, v in before.items():
        if k.startswith(("id:", "dispatch:", "dispatch-reg:")) and not identities or \
                k.startswith("dispatch-reg:") and not registrations:
            continue  # the full check's entries (after import, after each checked call, after timing)
        now = after.get(k, _MISSING)
        if k.startswith("id:"):
            if now is not v and not _rebound_by_import(k, v, now):
                changed.append(k[3:])
        elif k.startswith(("dispatch:", "dispatch-reg:")):
            if now != v:
                changed.append(k.split(":", 1)[1])
        elif now is not v and now != v:
            changed.append(k)
    return changed
