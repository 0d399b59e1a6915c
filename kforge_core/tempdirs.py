"""KForge's temporary directories: every one lives under one directory per process, which goes with the process.

Evaluations, fork servers, pre-started children, torch.compile baseline servers and trusted builds each get a
private directory from `make`; all of them sit under this process's own `<tempdir>/kforge-<pid>-<token>-<random>`
(made on first use, mode 0700, in `tempfile.gettempdir()`: TMPDIR is respected). At a normal exit (atexit; a run's
worker turns SIGTERM into one) the servers are closed first (`at_exit`: they may still be writing their logs
there), then the directory is removed. A process that dies without exiting (SIGKILL, the OOM killer, a crash)
cannot clean up after itself, so the first directory a process makes sweeps its siblings whose owner is gone: no
process with that pid any more, or a process that is not the one that made it (pids are reused: the token is a hash
of the owner's start time and this boot's id; `token`).

Never swept: anything not named `kforge-<pid>-<token>-...` (the build cache, `KFORGE_CACHE_DIR`, is a cache and
stays; so do directories of older KForge versions, which may still be running), a symlink, a directory another user
owns, one made in another PID namespace (the token starts with a hash of the namespace: from a container that shares
the temporary directory the owner's pid cannot be seen at all), and one with a mount point inside: an isolated
evaluation child's private /tmp holds its caller's directory name with only its own working directory bound in it.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

_NAME = re.compile(r"^kforge-(\d+)-([0-9a-f]{16})-[a-z0-9_]+$")
_NS_CHARS = 6  # the token's first characters: the PID namespace; the other 10: the process
_lock = threading.Lock()
_parents: dict[str, Path] = {}  # temporary root -> this process's directory there (TMPDIR may change: tests)
_owner = os.getpid()  # whose _parents these are: a forked child makes its own and never removes its parent's
_closers: list[Callable[[], None]] = []
_exiting = False


def make(prefix: str) -> Path:
    """A new private directory (0700) under this process's directory; the caller removes it when done, and
    whatever it leaves goes at exit. Raises OSError once the process is exiting."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent()))


def parent() -> Path:
    """This process's directory in the current temporary root, made (after a sweep of the root) on first use."""
    global _owner
    root = tempfile.gettempdir()
    with _lock:
        if _exiting:  # a server's background thread after the exit handler ran: it would be left behind
            raise OSError("the process is exiting: no new temporary directory")
        if _owner != os.getpid():
            _parents.clear()
            _owner = os.getpid()
        path = _parents.get(root)
        if path is None or not path.is_dir():  # gone: removed by hand, or by a cleaner of old files in /tmp
            me = token(os.getpid())
            if path is None and me is not None:  # without /proc no owner could be told alive: no sweep at all
                sweep(Path(root))
            # a name the sweep does not match when this process cannot tell who it is
            path = _parents[root] = Path(tempfile.mkdtemp(prefix=f"kforge-{os.getpid()}-{me or 'unknown'}-",
                                                          dir=root))
        return path


def at_exit(fn: Callable[[], None]) -> None:
    """Run `fn` at a normal exit, before this process's directories are removed (the last registered runs first).
    Quietly: an exception it raises is ignored. A module whose `fn` closes servers it keeps in a registry forgets
    them in a forked child (os.register_at_fork): they are its parent's, and so are their directories."""
    _closers.append(fn)


def _forget() -> None:
    global _owner, _lock
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork
    _parents.clear()
    _owner = os.getpid()


os.register_at_fork(after_in_child=_forget)  # a forked child makes its own directory and never removes its parent's


@atexit.register
def _at_exit() -> None:
    global _exiting
    if _owner != os.getpid():  # forked by a C fork() that ran no fork hook: nothing here is its own
        return
    with _lock:
        _exiting = True
    for fn in reversed(_closers):
        try:
            fn()
        except Exception:  # noqa: BLE001 - exiting: a failed close must not stop the rest
            pass
    for path in _parents.values():
        shutil.rmtree(path, ignore_errors=True)


def token(pid: int) -> str | None:
    """Who `pid` is (16 hex digits), or None when no such process runs (a zombie counts as gone: it runs nothing).
    The first 6 digits hash this PID namespace, the rest this boot's id, the pid and its start time (clock ticks
    since boot, /proc/<pid>/stat field 22): a later process given the same pid has another token. Without /proc
    (macOS) a running pid's token is the same for every process: a live owner is then never swept, a dead one is."""
    if not sys.platform.startswith("linux"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return _namespace() + "0" * (16 - _NS_CHARS)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):  # fields[0] is field 3, the state
        return None
    process = hashlib.sha256(f"{_boot_id()}:{pid}:{fields[19]}".encode()).hexdigest()
    return _namespace() + process[:16 - _NS_CHARS]


def _namespace() -> str:
    try:  # not cached: an isolated child's PID 1 is in a new namespace although forked from a process that asked
        ino = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ino = 0
    return hashlib.sha256(str(ino).encode()).hexdigest()[:_NS_CHARS]


@functools.lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def sweep(root: Path) -> list[Path]:
    """Remove the directories in `root` of KForge processes that are gone (see the module's docstring for what is
    never removed); returns them."""
    namespace, uid = _namespace(), os.geteuid()
    mounts: list[str] | None = None
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        m = _NAME.match(entry.name)
        if m is None or not m.group(2).startswith(namespace):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or token(int(m.group(1))) == m.group(2):
            continue
        if mounts is None:
            from .eval.new_root import mount_points  # read only when there is something to sweep

            mounts = mount_points()
        top = entry.path.rstrip("/") + "/"
        if any(p.startswith(top) for p in mounts):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed

