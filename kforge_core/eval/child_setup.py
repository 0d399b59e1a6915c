"""What an evaluation child is given before it starts: its environment (an allow-list, credentials stripped, the
shared caches), how its interpreter starts, and its isolation plan (the paths its new root shows read-only, writable
or not at all; its process and file-size limits). `sandbox` starts children with these; the fork server, the
pre-started pool and the torch.compile baseline server set up theirs the same way."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

from .. import paths
from ..errors import SandboxError, UsageError
from ..platform import REPO_ROOT
from . import isolation
from .cpu_probe import usable_cores
from .redaction import _CREDENTIAL as _ENV_SECRET

_ENV_ALLOW = re.compile(
    r"^(PATH|LANG|LANGUAGE|LC_\w+|TZ|TERM|TMPDIR|CC|CXX|LD_LIBRARY_PATH|LIBRARY_PATH|CPATH|"
    r"CUDA_\w+|NVIDIA_\w+|ROCM_\w+|HIP_\w+|TORCH_\w+|TORCHINDUCTOR_\w+|TRITON_\w+|PYTORCH_\w+|OMP_\w+|MKL_\w+|"
    r"KMP_\w+|OPENBLAS_\w+|GOMP_\w+|MALLOC_\w+|KFORGE_\w+|VIRTUAL_ENV|CONDA_PREFIX|PYTHONHASHSEED|NCCL_\w+|"
    r"NVSHMEM_\w+|MPS_\w+|METAL_\w+)$")


def cache_dir() -> Path:
    """The cache directory (absolute, resolved: `paths.cache_dir`), made if missing; caller side, before any child
    starts. Refused, naming the variable, where it cannot work: a place KForge cannot make or write (builds are
    published there), or a directory children are given as a tree of their own (the project, a sys.path or
    PYTHONPATH directory: the cache's folders would be mixed into it, and its empty `triton` folder, on the import
    path, was imported as the triton package). Anywhere else works, inside such a tree included."""
    d = paths.cache_dir()
    named = f"KFORGE_CACHE_DIR={os.environ['KFORGE_CACHE_DIR']!r}" if os.environ.get("KFORGE_CACHE_DIR") else \
        "the default cache directory (KFORGE_CACHE_DIR unset)"
    for tree, what in _given_trees():
        if os.path.realpath(tree) == str(d):
            raise UsageError(f"{named}: {d} is {what}, which evaluation children are given as it is: the cache's "
                             f"folders ({', '.join(('builds', *COMPILE_CACHES.values()))}) would be mixed into it, and an "
                             "empty `triton` folder on the import path is imported as the triton package; give the "
                             f"cache a directory of its own, e.g. {d / '.kforge-cache'}")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{named}: cannot make the cache directory {d}: {e.strerror or e}") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise UsageError(f"{named}: the cache directory {d} is not writable (builds are published there)")
    return d


# How every evaluation child's interpreter starts (spawned children, the fork server, the builtin tracer): -P
# (Python >= 3.11) keeps the working directory -- the candidate's private directory, which it may write -- off
# sys.path, so a lazy import (torch's `import sympy`) can never find a module the candidate planted there; -s drops
# the user site directory (HOME is the working directory). The harness is found through PYTHONPATH (the repo root).
PYTHON_FLAGS: tuple[str, ...] = ("-P", "-s") if sys.version_info >= (3, 11) else ("-s",)


def python_command(module: str) -> list[str]:
    return [sys.executable, *PYTHON_FLAGS, "-m", module]


def child_environment(workdir: Path, isolated: bool = False) -> dict[str, str]:
    cache = cache_dir()  # absolute: a child's working directory is its own
    env = {k: v for k, v in os.environ.items() if _ENV_ALLOW.match(k) and not _ENV_SECRET.search(k)}
    if isolated:
        env["TMPDIR"] = "/tmp"  # the child's own private /tmp; the caller's TMPDIR is not in its root
        env["USER"] = env["LOGNAME"] = CHILD_USER  # getpass.getuser(): a root caller's child has no passwd entry
    env.update(
        HOME=str(workdir),
        # the repo first, then the caller's own entries (third-party platform modules named in KFORGE_PLATFORMS)
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
        PYTHONUNBUFFERED="1",
        # what PYTHON_FLAGS does, for the Python processes a child starts itself (ncu's profiled child runs
        # `python -m` in the candidate's directory; inductor's workers): no working directory, no user site
        PYTHONSAFEPATH="1",
        PYTHONNOUSERSITE="1",
        KFORGE_CACHE_DIR=str(cache),
        **compile_caches(cache, isolated),
    )
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    for name, value in timing_environment().items():
        env.setdefault(name, value)  # the caller's own setting wins (and the verdict says what was in force)
    return env


# glibc's malloc keeps a freed block at the top of its heap only while that block is below its trim threshold, and
# learns its mmap threshold from the blocks freed so far: whether a model's tensors of a few MiB come back from
# memory the process already touched or from fresh pages depended on the history of the process (what it had freed
# before, in what order). Fresh pages are page faults inside the timed call, ~2.4 us each on the 2-core box (a
# Firecracker VM): eager swish on 8 MiB was 1.47 ms in some evaluations and 4.4 ms (every call faulting its 16 MiB
# of temporaries) in others. Fixed thresholds, the same in every timed process: blocks up to 32 MiB (glibc's
# largest allowed mmap threshold) come from the heap, which is never trimmed while a phase runs, so every side's
# repeated calls reuse memory in every evaluation, as a warmed-up process's do (and as CUDA's caching allocator
# does on a GPU); larger blocks are mapped fresh on every call, on every side alike. Between phases the judge gives
# the heap's free memory back (harness/footprint.release).
MALLOC_MMAP_THRESHOLD = 32 << 20
MALLOC_TRIM_THRESHOLD = 1 << 40  # never, in practice


def timing_environment() -> dict[str, str]:
    """What every timed process of an evaluation (judge, candidate's process, torch.compile baseline server, the
    fork server they may come from) runs under, unless the caller set it: one thread count for every OpenMP pool
    (torch's intra-op pool and a candidate's own), pools that sleep when idle, and the allocator policy above."""
    return {
        # An evaluation runs in several processes that each hold an OpenMP pool (the judge timing eager, the
        # candidate's process, the torch.compile baseline server): pools that spin after each parallel region
        # (GNU's default) take the cores from the process whose turn it is. Measured on the 2-core box, one run,
        # swish_small: the judge's fastest bracket around a 0.24 ms timed call 3.6-8.4 ms spinning, 0.25-0.27 ms
        # passive; the compiled baseline 24-55 ms spinning, 4-11 ms passive.
        "OMP_WAIT_POLICY": "PASSIVE",
        # stated rather than left to each runtime's own default (the cores this process may use), so that every
        # side's pools have the same size whatever affinity a child inherits
        "OMP_NUM_THREADS": str(usable_cores()),
        "MALLOC_MMAP_THRESHOLD_": str(MALLOC_MMAP_THRESHOLD),
        "MALLOC_TRIM_THRESHOLD_": str(MALLOC_TRIM_THRESHOLD),
    }


def isolation_status() -> tuple[bool, str]:
    """(isolated, why not): whether children run in namespaces. Raises SandboxError when KFORGE_ISOLATION=require
    and they cannot."""
    ok, why = isolation.status()
    if not ok and isolation.requested() == "require":
        raise SandboxError(f"OS isolation is required (KFORGE_ISOLATION=require) but unavailable: {why}")
    return ok, why


def _given_trees() -> list[tuple[str, str]]:
    """The trees an isolated child is given read-only, besides the toolchain and the caches: (path, what it is)."""
    trees = [(p, "the Python installation") for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    trees += [(str(REPO_ROOT), "the project's directory"), (os.path.dirname(sys.executable), "the Python installation")]
    for var in ("PYTHONPATH", "PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH"):
        trees += [(p, f"a {var} directory") for p in os.environ.get(var, "").split(os.pathsep) if os.path.isabs(p)]
    trees += [(p, "a directory on the import path (sys.path: the script's or the working directory)")
              for p in sys.path if p and os.path.isabs(p)]
    trees += [(os.environ[v], v) for v in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH")
              if os.path.isabs(os.environ.get(v, ""))]
    home = os.path.realpath(os.path.expanduser("~"))
    return [(p, what) for p, what in trees if os.path.realpath(p) not in (home, "/")]


def _child_paths() -> tuple[list[str], list[str]]:
    """(read-only, hidden) paths of an isolated child, besides the toolchain and its workdir (it writes nothing
    else: its private directory, /tmp and /dev/shm, its compile caches in that /tmp)."""
    readonly = [tree for tree, _ in _given_trees()]
    home = os.path.realpath(os.path.expanduser("~"))
    cache = cache_dir()
    from .. import build_cache
    from . import ceilings

    # the ceilings' folder, made if missing: a bind only of what exists would change a child's plan when the first
    # timed evaluation stores them, and children pre-started for the old plan (`warm_pool`, a run's `prepare`)
    # would be thrown away; a bind of the file alone would keep showing them the file it replaced
    ceilings_dir = ceilings.cache_path().parent
    with contextlib.suppress(OSError):
        ceilings_dir.mkdir(parents=True, exist_ok=True)
    readonly += [str(build_cache.cache_root()), str(ceilings_dir)]
    hidden = [home, str(cache)]
    try:
        from ..llm.config import settings_path

        hidden.append(str(settings_path()))
    except Exception:  # noqa: BLE001 - no settings module, no settings file to hide
        pass
    try:
        from ..store.db import resolve_db_path

        hidden.append(str(resolve_db_path().parent))
    except Exception:  # noqa: BLE001
        pass
    return readonly, hidden


# torch.compile's, Triton's, torch's extension builds' and the XDG caches. The shared ones (under the cache
# directory) are written and read only by trusted processes: the caller and the torch.compile baseline server
# (`baselines`, not isolated). An isolated child gets empty ones of its own in its private /tmp, gone with it:
# inductor and Triton load what they find in their cache (generated Python, shared objects, pickles) without
# checking who wrote it, so a candidate that could write the shared ones would have its code run by a later
# baseline server (outside the sandbox) or judge (owner of the verdict). Candidates' builds are cached apart,
# in the build cache, published by the caller and checked against its index.
COMPILE_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton",
                  "TORCH_EXTENSIONS_DIR": "torch_extensions", "XDG_CACHE_HOME": "xdg"}  # variable -> folder
PRIVATE_CACHES = "/tmp/kforge-caches"  # inside an isolated child's root: its own tmpfs


def compile_caches(cache: Path, isolated: bool) -> dict[str, str]:
    """The cache variables of a child's environment: the shared caches for a process outside the sandbox (the
    baseline server; a child where isolation is unavailable, which could write them anyway), private ones for an
    isolated child."""
    base = PRIVATE_CACHES if isolated else str(cache)
    return {var: f"{base}/{folder}" for var, folder in COMPILE_CACHES.items()}


CHILD_USER = "kforge"  # $USER inside an isolated child


def nproc_limit() -> int:
    """Processes and threads an evaluation may hold at once (torch's thread pools and inductor's workers count)."""
    return int(os.environ.get("KFORGE_EVAL_NPROC") or 1024 + 32 * (os.cpu_count() or 1))


def child_plan(workdir: Path) -> dict:
    readonly, hidden = _child_paths()
    # No shared cache is writable (compile_caches): inductor's precompiled headers, which it keeps under its
    # *default* directory ($TMPDIR/torchinductor_$USER) whatever TORCHINDUCTOR_CACHE_DIR says, stay in the private
    # /tmp too. Only a child that compiles the torch.compile baseline itself pays for them (KFORGE_SHARED_BASELINE=0:
    # 7 s of g++ on two busy cores); by default the baseline server compiles it, with the shared caches.
    return isolation.plan(workdir, readonly=readonly, writable=[], hide=hidden, nproc=nproc_limit(),
                          fsize_mb=int(os.environ.get("KFORGE_EVAL_FSIZE_MB") or 4096))
