"""OS isolation for evaluation children (Linux): a user + mount + PID + network + IPC namespace, unprivileged.

Why namespaces and not more deny-lists: candidate code may run native code, so anything the child's kernel-level view
holds is reachable. The child therefore gets a new root built from an allow-list, not the machine with holes
patched:

- the interpreter's prefix and every sys.path directory, the project, the toolchain (/usr, the allowed /etc
  entries), /sys: read-only; device nodes: null, zero, full, random, urandom, and the GPU's (nvidia*, dri);
- a fresh /proc of its own PID namespace (no other process is visible: not the caller's environ, not the fork
  server's memory), a private /tmp and /dev/shm (tmpfs);
- writable: its private working directory only, plus the torch.compile/Triton caches (see docs/EVALUATOR.md:
  those are shared with the eager/compile baselines until the baselines move to a judge process);
- the build cache read-only (builds are published by the trusted caller: `kforge_core.eval.build_service`);
- HOME, the settings file, the run store and everything else not listed: absent (not in the new root at all), and
  hidden with empty mounts where they lie under an allowed tree (e.g. a run store inside the project);
- no network (a fresh network namespace has only a down loopback): the caller's app and LLM endpoint are out of
  reach;
- PID 1 of its own PID namespace is the evaluation itself: when it dies, the kernel kills every process it left
  (setsid and double-fork daemons included); RLIMIT_NPROC counts only this namespace's processes, RLIMIT_FSIZE
  bounds every file it writes (the candidate's process and builds: soft = hard; the judge keeps the hard limit
  open to size its shared arena, a memfd as large as the problem's tensors, and writes no file of its own).

`enter(plan)` runs in a single-threaded child right after fork (the fork server's child, or `kforge_core.eval.jail`
before it execs a spawned child). The process that calls it stays outside the new PID namespace as a small relay:
it waits for the namespace's PID 1 and exits with its status, so the caller's bookkeeping (pids, exit codes,
process-group kills) is unchanged. `plan(...)` is computed by the caller (trusted) and passed as JSON.

Where namespaces are unavailable (not Linux, a kernel or container that forbids unprivileged user namespaces, or
`KFORGE_ISOLATION=0`), children run as before: scrubbed environment, no capabilities, own session, non-dumpable
caller; `status()` says why, every verdict carries that reason as a warning, and `KFORGE_ISOLATION=require` refuses
to evaluate instead.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path

from .new_root import PIVOT_ROOT, PRIVATE, build_root, check

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
FLAGS = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC

# /etc entries a compiler, the dynamic loader, Python and CUDA need; the rest of /etc (shadow, ssh keys, ...) stays out
ETC_ALLOW = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
             "localtime", "timezone", "hosts", "os-release", "debian_version", "lsb-release", "OpenCL", "vulkan",
             "glvnd", "nvidia", "gcc", "mime.types", "locale.alias", "locale.gen", "ssl")
DEV_ALLOW = ("null", "zero", "full", "random", "urandom", "tty")
DEV_GPU_PREFIXES = ("nvidia", "dri", "kfd")
TOOLCHAIN = ("/usr", "/opt", "/sys")
# /bin, /lib, ... are symlinks into /usr on merged-usr systems, else bound too
TOP_LEVEL_MAYBE_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

NOBODY = 65534
_status: tuple[bool, str] | None = None
_status_lock = threading.Lock()
# One os.fork at a time in the caller: filelock (imported by torch) adds an audit hook on Python >= 3.12 that
# refuses an os.fork while another thread of the process is inside one ("os.fork is unsafe while filelock is changing
# descriptor ownership"): a run's first generation and its prepare thread both probing made the first problem of
# every Ray worker fail on the 4-GPU host.
_fork_lock = threading.Lock()
FORK_RETRY_S = 5.0


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def requested() -> str:
    """'0' (off), 'require' (refuse to evaluate without it) or '1' (use when available; the default)."""
    value = os.environ.get("KFORGE_ISOLATION", "1").strip().lower()
    if value in ("0", "off", "false", "no"):
        return "0"
    return "require" if value == "require" else "1"


def status() -> tuple[bool, str]:
    """(available, why not). Probed once per process by entering a namespace in a throw-away child."""
    global _status
    if _status is None:
        with _status_lock:  # threads asking at once wait for the one probe
            if _status is None:
                _status = _probe()
    return _status


def _probe() -> tuple[bool, str]:
    if requested() == "0":
        return False, "turned off (KFORGE_ISOLATION=0)"
    if not sys.platform.startswith("linux"):
        return False, f"namespaces are Linux-only (this is {sys.platform})"
    if os.uname().machine not in PIVOT_ROOT:
        return False, f"no pivot_root syscall number known for {os.uname().machine}"

    from .. import tempdirs

    # made by the probe's PID 1 and mounted over in the probe's mount namespace, which lasts until the forked
    # child exits: removable here only, afterwards (the child's own rmdir failed with EBUSY and left one per probe)
    probe_dir = tempdirs.parent() / f".isolation-probe-{os.urandom(4).hex()}"

    def attempt() -> bytes:
        try:
            # the mounts a real evaluation makes, not an empty root: a kernel may allow the namespaces and refuse
            # the binds (gVisor on the lent GPU machines: "mount /usr ... Invalid argument")
            full = plan(None, readonly=[], writable=[], hide=[], nproc=64, fsize_mb=16)
            enter({**full, "root": str(probe_dir)}, relay=False)
            return b"ok"
        except OSError as e:
            return str(e).encode()[:500]

    try:
        data = in_fork(attempt)
    finally:
        try:
            probe_dir.rmdir()
        except OSError:
            pass
    text = data.decode(errors="replace")
    if text == "ok":
        return True, ""
    return False, f"user namespaces unavailable here ({text or 'the probe died'})"


def fork() -> int:
    """os.fork for a caller with threads: one fork of ours at a time (`_fork_lock`), and retried for a moment when a
    thread that is not ours is forking (an at-fork hook may refuse meanwhile: the RuntimeError above)."""
    deadline = time.monotonic() + FORK_RETRY_S
    with _fork_lock:
        while True:
            try:
                return os.fork()
            except RuntimeError as e:
                if "fork" not in str(e) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)


def in_fork(fn) -> bytes:
    """fn() in a forked child (whatever it changes about its process stays there); returns the bytes it returned."""
    r, w = os.pipe()
    try:
        pid = fork()
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    if pid == 0:  # pragma: no cover - child
        try:
            os.close(r)
            os.write(w, fn())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return data


def plan(workdir: Path | None, *, readonly: list[str], writable: list[str], hide: list[str],
         nproc: int, fsize_mb: int, mapped: dict[str, str] | None = None) -> dict:
    """What a child's new root holds. Computed by the caller; every path absolute and resolved."""
    wanted: dict[str, tuple[str, bool]] = {}

    def add(path: str, rw: bool) -> None:
        target = os.path.normpath(os.path.abspath(path))
        # never the host's /, /tmp, /dev, /dev/shm or /proc (a caller's script in /tmp puts /tmp on sys.path): the
        # child gets private ones, and a tree bound there would hide what is bound inside it
        if os.path.exists(target) and target not in PRIVATE:
            wanted[target] = (os.path.realpath(target), rw or wanted.get(target, ("", False))[1])

    for entry in TOOLCHAIN:
        add(entry, False)
    for entry in TOP_LEVEL_MAYBE_LINKS:
        if os.path.exists(entry) and not os.path.islink(entry):
            add(entry, False)
    for name in ETC_ALLOW:
        add(f"/etc/{name}", False)
    for entry in readonly:
        add(entry, False)
    for entry in writable:
        add(entry, True)
    # Every mount costs twice (made, then torn down with the namespace), so: a read-only path inside a tree already
    # bound comes with it; one that resolves into such a tree becomes a symlink; a small /etc file is copied
    binds, copies, along = [], [], []
    links = {p: os.readlink(p) for p in TOP_LEVEL_MAYBE_LINKS if os.path.islink(p)}
    for target in sorted(wanted, key=len):
        source, rw = wanted[target]
        trees = [b["target"] for b in binds if not b["rw"] and b["source"] == b["target"]]
        if not rw and _under_any(source, trees):
            if source != target and target not in links:
                links[target] = source
            along.append(target)
            continue
        if not rw and target.startswith("/etc/") and os.path.isfile(source) and os.path.getsize(source) <= 1 << 20:
            copies.append({"source": source, "target": target})
            continue
        binds.append({"source": source, "target": target, "rw": rw})
    for target, source in (mapped or {}).items():  # writable elsewhere inside than outside
        if os.path.isdir(source):
            binds.append({"source": os.path.realpath(source), "target": target, "rw": True})
    devs = [f"/dev/{n}" for n in DEV_ALLOW if os.path.exists(f"/dev/{n}")]
    try:
        devs += [f"/dev/{n}" for n in sorted(os.listdir("/dev")) if n.startswith(DEV_GPU_PREFIXES)]
    except OSError:
        pass
    # hidden: only what an allowed tree would otherwise show (the rest is simply not in the new root), by its name
    # and by its resolved path (a cache named through a symlink that lies in the project is in the project's bind)
    # (the private /tmp and /dev/shm count: a cache under the caller's /tmp would otherwise be a writable, empty
    # directory there)
    # (the child's own /, /tmp, /dev/shm are never covered: a cache at $TMPDIR made the child's /tmp read-only)
    names = {n for h in hide if h and os.path.lexists(h) for n in (os.path.normpath(os.path.abspath(h)),
                                                                     os.path.realpath(h))}
    hidden = sorted(h for h in names if h not in PRIVATE and _under_any(
        h, ["/tmp", "/dev/shm", *(b["target"] for b in binds if not _under(b["target"], h))]))
    # An allowed path that came with its tree but lies under a hidden one would be covered with it: the build cache
    # inside the project or inside a sys.path directory (KFORGE_CACHE_DIR=./.kforge-cache) showed the child an empty
    # cache, and every build failed its index check. Bound on its own (after the cover: build_root mounts by depth).
    for target in along:
        source = wanted[target][0]
        if _under_any(target, hidden) or _under_any(source, hidden):
            links.pop(target, None)
            binds.append({"source": source, "target": target, "rw": False})
    return {"root": str(Path(workdir).parent / f".{Path(workdir).name}.root") if workdir else None,
            "binds": binds, "copies": copies, "links": links, "devs": devs, "hide": hidden,
            "workdir": str(workdir) if workdir else None, "nproc": nproc, "fsize_mb": fsize_mb}


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _under_any(path: str, tops: list[str]) -> bool:
    return any(_under(path, t) for t in tops)


def _write_file(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter(p: dict, relay: bool = True) -> None:
    """Enter new namespaces and a new root built from plan `p`. In the relay (the caller of enter) this never
    returns: it waits for the namespace's PID 1 and exits with its status. Returns in PID 1 once the root is
    ready (working directory = the workdir, no capabilities left to drop but the caller's own drop_privileges).
    Raises OSError before anything changed when namespaces cannot be created."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    # a non-dumpable process's /proc/self files belong to the host's root: it could not write its own uid_map
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    check(libc.unshare(FLAGS), "unshare")
    # The same ids inside as outside, except root, which is `nobody` inside (still the host's root for file
    # ownership: hence the new root). Mapping the host's root at all needs CAP_SETFCAP at unshare time: a root
    # caller's child enters before it drops its capabilities (sandbox.limits(..., drop=False))
    _write_file("/proc/self/setgroups", "deny")
    _write_file("/proc/self/uid_map", f"{uid or NOBODY} {uid} 1\n")
    _write_file("/proc/self/gid_map", f"{gid or NOBODY} {gid} 1\n")
    # a probe (relay=False) hears why PID 1 could not build the root: "exit 1" alone says nothing to fix
    why_r, why_w = os.pipe() if not relay else (-1, -1)
    pid = os.fork()  # the new PID namespace holds the children of the unsharing process only
    if pid != 0:
        if not relay:
            os.close(why_w)
            with os.fdopen(why_r, "rb") as f:
                why = f.read(2000).decode(errors="replace").strip()
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                raise OSError(errno.EPERM, f"setting up the new root failed: {why or f'exit {code}'}")
            return
        _relay(pid)
    if not relay:
        os.close(why_r)
    try:
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: the relay's death ends the namespace
        build_root(libc, p)
        # counted per user namespace: this limit bounds only the evaluation's own processes and threads
        resource.setrlimit(resource.RLIMIT_NPROC, (p["nproc"], p["nproc"]))
        n = p["fsize_mb"] * 1024 * 1024
        # soft limit only here: a judge must size its shared arena past it (`harness.shared.sealed_memfd`); every
        # other process lowers the hard limit to it before any problem or candidate code runs (`harness.child`)
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        resource.setrlimit(resource.RLIMIT_FSIZE, (n if hard == resource.RLIM_INFINITY else min(n, hard), hard))
    except BaseException as e:  # noqa: BLE001 - report and die: never run candidate code half-isolated
        if not relay:
            os.write(why_w, f"{type(e).__name__}: {e}".encode()[:2000])
            os._exit(1)
        os.write(2, f"kforge isolation: {type(e).__name__}: {e}\n".encode())
        os._exit(71)
    if not relay:
        os.close(why_w)
        os._exit(0)


def _relay(pid: int) -> None:
    """Outside the PID namespace: mirror PID 1's exit, and take it down with us if we are killed."""
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError as e:
            os.write(2, f"kforge isolation: lost the evaluation's PID 1: {e}\n".encode())
            os._exit(70)
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


class PidsCgroup:
    """A pids cgroup of its own per evaluation, where the caller may create one (root on cgroup v1; a delegated
    cgroup v2 subtree): caps the evaluation's processes and threads even for the host's root, whom the kernel
    exempts from RLIMIT_NPROC, and lists every descendant for the final kill, namespaces or not."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, limit: int) -> PidsCgroup | None:
        base = _own_pids_cgroup()
        if base is None:
            return None
        path = base / f"kforge-eval-{os.getpid()}-{os.urandom(6).hex()}"
        try:
            path.mkdir()
        except OSError:
            return None
        group = cls(path)
        try:
            (path / "pids.max").write_text(str(limit))
        except OSError:
            group.remove()
            return None
        return group

    @property
    def procs(self) -> str:
        """What the child writes its pid to, to join (before it runs anything else)."""
        return str(self.path / "cgroup.procs")

    def kill_all(self) -> None:
        for _ in range(50):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                return
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        try:
            self.path.rmdir()
        except OSError:
            pass


def _own_pids_cgroup() -> Path | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            base = Path("/sys/fs/cgroup/pids") / path.lstrip("/")
            return base if os.access(base, os.W_OK) else None
    for line in lines:  # cgroup v2: usable only where the pids controller is delegated to our subtree
        if line.startswith("0::"):
            base = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
            try:
                ok = "pids" in (base / "cgroup.subtree_control").read_text().split()
            except OSError:
                ok = False
            return base if ok and os.access(base, os.W_OK) else None
    return None


def join_cgroup(procs: str | None) -> None:
    """In the child, first thing: move into the evaluation's pids cgroup."""
    if procs:
        fd = os.open(procs, os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)


CAP_SETFCAP = 31


def drop_privileges(keep: tuple[int, ...] = ()) -> None:
    """In a child about to run candidate code (after fork, before exec; again after entering namespaces): no new
    privileges (setuid programs do not elevate), an empty capability bounding set and no capabilities held now,
    so after exec the child holds none at all. Without this a root child keeps CAP_SYS_PTRACE, which overrides the
    caller's non-dumpable flag and lets it read the caller's /proc/<pid>/environ (the API key), and
    CAP_DAC_OVERRIDE, which opens every file on the machine; and a child of any uid that has just created a user
    namespace holds every capability inside it (it could remount its read-only project tree writable). The child
    keeps its uid, so it still owns its private directory. `keep` (capability numbers below 32) stay, for the fork
    server and a child about to enter namespaces only."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        for cap in range(64):  # PR_CAPBSET_DROP; EPERM without CAP_SETPCAP, EINVAL past the last one: harmless
            if cap not in keep:
                libc.prctl(24, cap, 0, 0, 0)
        # and the capabilities held now (a fork-server child runs candidate code without an exec)
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        bits = sum(1 << c for c in keep) if os.geteuid() == 0 else 0
        data = (ctypes.c_uint32 * 6)(bits, bits, 0, 0, 0, 0)  # effective, permitted, inheritable (low, high)
        libc.capset(header, data)
    except (OSError, AttributeError):
        pass
