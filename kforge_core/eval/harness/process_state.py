"""Readings of the process's global state that a candidate could change to sway the reference or the harness:
global numerics settings, interception points (torch function/dispatch modes, global module hooks), every attribute
of torch and of the harness's own modules by identity, ATen's dispatcher registrations, signal dispositions and timers.

`kforge_core.eval.harness.guards` assembles them into `snapshot_state()` and compares with `changed_state()`; the
ATen ops worth watching are recorded here by `record_ops` (from the reference's and the comparison's own calls).
"""

from __future__ import annotations

import re
import sys

MISSING = object()


def read(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a setting this torch build lacks is simply not compared
        return MISSING


# ------------------------------------------------------------------------------------------- global native state
#
# Native code changes process-wide behaviour no Python identity shows: a TORCH_LIBRARY_IMPL(aten, CPU, ...) in an
# extension replaced ATen's kernels, so the comparison itself (float64 abs returning zeros: "max abs error 0") and
# the reference ran through the candidate's code; signal handlers and timers change what a hang or a slow call does.
# The object allow-list (native.py) refuses the symbols that do this; these snapshots back it at run time.

watched_ops: set[str] = set()  # the ATen ops the reference and the comparison ran (recorded by run.py)
# registration lists per key (the alias keys hold what TORCH_LIBRARY_IMPL(aten, Autograd, ...) registers)
_DISPATCH_KEYS = ("CPU", "CUDA", "MPS", "Autograd", "CompositeImplicitAutograd", "CompositeExplicitAutograd")
_DISPATCH_LINE = re.compile(r"^(CPU|CUDA|MPS|Autograd(CPU|CUDA|MPS)?|CompositeImplicitAutograd|"
                            r"CompositeExplicitAutograd(NonFunctional)?)(\[alias\])?: ")


# The signals whose handlers could run a candidate's work outside the timed call: those its own timers deliver
# (SIGALRM, SIGVTALRM, SIGPROF, and the real-time signals timer_create may name) and SIGIO. Other dispositions
# belong to the runtimes an honest kernel brings up on its first call: glibc's thread signals, and LLVM's crash
# handlers that Triton's first compile installs (SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM, SIGXCPU, SIGXFSZ, SIGSYS,
# seen on an H100); a handler nothing can trigger defers nothing.
_WATCHED_SIGNALS = sum(1 << (n - 1) for n in (14, 26, 27, 29, *range(34, 65)))



def native_state() -> dict[str, object]:
    """Signal dispositions of the watched signals (caught and ignored masks, process-wide), interval timers and
    POSIX timers: cheap enough for every call."""
    import signal

    snap: dict[str, object] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(("SigIgn:", "SigCgt:")):
                    mask = int(line.split()[1], 16) & _WATCHED_SIGNALS
                    snap[f"signal dispositions ({line[:6]})"] = f"{mask:016x}"
    except OSError:
        pass
    for which in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"):
        value, interval = signal.getitimer(getattr(signal, which))
        snap[f"interval timer {which}"] = (value > 0, interval)
    try:
        # our read, not the candidate's: `guards.snapshot_state` takes this inside `trusted()` (the audit hook
        # refuses /proc/self/timers to candidate code)
        with open("/proc/self/timers", encoding="ascii") as f:
            snap["POSIX timers"] = sum(1 for line in f if line.startswith("ID:"))
    except OSError:
        pass
    return snap


def dispatcher(torch, registrations: bool) -> dict[str, object]:
    """Which ATen ops have a kernel for each backend key (a new registration), and the backend kernels of the ops
    the reference and the comparison use (a replaced one: its `registered at` names the extension). Other
    namespaces are left out: torch's own lazy imports register ops there (fsdp::, c10d_functional::, ...).
    The registration lists cost milliseconds: taken at the phase checks (`registrations`), not after every call."""
    snap: dict[str, object] = {}
    for key in _DISPATCH_KEYS if registrations else ():
        found = read(lambda key=key: torch._C._dispatch_get_registrations_for_dispatch_key(key))
        if found is not MISSING:
            snap[f"dispatch-reg:dispatcher registrations for {key}"] = frozenset(n for n in found if n.startswith("aten::"))
    for op in sorted(watched_ops):
        dump = read(lambda op=op: torch._C._dispatch_dump(op))
        if dump is not MISSING:
            snap[f"dispatch:dispatcher kernels of {op}"] = "\n".join(ln for ln in dump.splitlines() if _DISPATCH_LINE.match(ln))
    return snap


reference_ops: set[str] = set()  # the ATen ops the reference's forward ran


def record_ops(fn, *into: set[str]):
    """Run `fn()` and add the names of the ATen ops it dispatched to each set in `into` (default: `watched_ops`).
    The mode is entered and left here, around exactly this call."""
    from torch.utils._python_dispatch import TorchDispatchMode

    targets = into or (watched_ops,)

    class _Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = getattr(getattr(func, "_schema", None), "name", None)
            if name:
                for target in targets:
                    target.add(name)
            return func(*args, **(kwargs or {}))

    with _Recorder():
        return fn()


def settings(torch) -> dict[str, object]:
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
    return {k: v for k, v in ((k, read(fn)) for k, fn in reads.items()) if v is not MISSING}


def interposition(torch) -> dict[str, object]:
    """Ways to intercept *every* torch call or module call, the reference's and the harness's included: torch
    function / dispatch modes left on the stack (a context entered in a suspended generator) and global module
    hooks (torch.nn.modules.module.register_module_forward_hook and friends)."""
    import torch.nn.modules.module as module_mod

    snap: dict[str, object] = {
        "torch function modes": read(torch._C._len_torch_function_stack),
        "torch dispatch modes": read(torch._C._len_torch_dispatch_stack),
    }
    for name, value in vars(module_mod).items():
        if name.startswith("_global_") and isinstance(value, dict):
            snap[f"global module hooks ({name})"] = len(value)
    return {k: v for k, v in snap.items() if v is not MISSING}


IDENTITY_MODULES = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special", "math", "time",
                    "builtins", "kforge_core.eval.harness.compare", "kforge_core.eval.harness.correctness",
                    "kforge_core.eval.harness.timing", "kforge_core.eval.harness.loading",
                    "kforge_core.eval.harness.launches", "kforge_core.eval.harness.run",
                    "kforge_core.eval.harness.in_process",
                    "kforge_core.eval.harness.guards", "kforge_core.eval.harness.process_state",
                    "kforge_core.eval.harness.native", "kforge_core.eval.tolerance",
                    "kforge_core.platform", "platforms._ctypes_kernels")


def identities_of(torch) -> dict[str, object]:
    """Every attribute of torch, its tensor and module classes, math/time/builtins and the harness's own modules,
    by identity: whatever a candidate patches there (directly or through any alias) shows up as changed."""
    snap: dict[str, object] = {}
    spaces = [(name, sys.modules[name]) for name in IDENTITY_MODULES if name in sys.modules]
    spaces += [("torch.Tensor", torch.Tensor), ("torch._C.TensorBase", torch._C.TensorBase),
               ("torch.nn.Module", torch.nn.Module), ("torch.nn.Parameter", torch.nn.Parameter)]
    spaces += [(f"{cls.__module__}.{cls.__qualname__}", cls) for cls in _platform_classes()]
    for prefix, space in spaces:
        for name, value in vars(space).items():
            snap[f"id:{prefix}.{name}"] = value
    return snap


def _platform_classes() -> list[type]:
    """Every loaded platform and timer class (kforge_core.platform's Platform and Timer, and their subclasses in
    platforms/): the cache flush, synchronisation and timers the candidate's own process calls around its timed
    calls. A candidate that replaced one on the class (say `flush_cache`, so its inputs stay cached while eager's are
    evicted) shows up as changed; the instance's own attributes are not consulted (`class_call`)."""
    base = sys.modules.get("kforge_core.platform")
    if base is None:
        return []
    out, todo = [], [base.Platform, base.Timer]
    while todo:
        cls = todo.pop()
        if cls not in out:
            out.append(cls)
            todo.extend(type.__subclasses__(cls))
    return out


def class_call(obj, name: str, *args):
    """`obj.name(*args)` through its class, never an attribute set on the instance (which no snapshot of the classes
    would see): the platform's flush and the timer, as the candidate's process calls them."""
    return getattr(type(obj), name)(obj, *args)

