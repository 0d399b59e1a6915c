"""The new root an isolated child runs in, built by mounts from a plan (`kforge_core.eval.isolation.plan`): a tmpfs
root, read-only binds of the allowed trees, private /tmp, /dev, /dev/shm and /proc, empty covers over hidden paths,
then pivot_root into it. Runs in PID 1 of the new namespaces (`isolation.enter`), which holds every capability of its
own user namespace until it drops them; nothing it mounts propagates back to the host.
"""

from __future__ import annotations

import ctypes
import os

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
# statvfs f_flag bits -> mount flags: a bind mount in a user namespace must keep the flags its source mount has
# ("locked" flags), or the read-only remount fails with EPERM
_LOCKED = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
           (getattr(os, "ST_NOATIME", 1024), MS_NOATIME), (getattr(os, "ST_NODIRATIME", 2048), MS_NODIRATIME),
           (getattr(os, "ST_RELATIME", 4096), MS_RELATIME), (os.ST_RDONLY, MS_RDONLY))
RECURSIVE = ("/sys",)  # bound with what is mounted inside, all read-only
PRIVATE = ("/", "/tmp", "/dev", "/dev/shm", "/proc")  # the child's own; never bound from the host
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers


def check(rc: int, what: str) -> None:
    """Raise OSError with errno's message for a libc call that returned non-zero."""
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _mount(libc, source, target, fstype, flags, data=None) -> None:
    check(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags,
                     data and data.encode()), f"mount {source} on {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def _readonly_tree(libc, target: str) -> None:
    """Make a recursive bind read-only with everything mounted under it (mount_setattr, Linux 5.12+): /sys holds
    the cgroup file systems, whose files the host's root owns and could otherwise write."""
    attr = _MountAttr(1 | 2 | 4, 0, 0, 0)  # MOUNT_ATTR_RDONLY | NOSUID | NODEV
    check(libc.syscall(442, -100, target.encode(), 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)),
           f"mount_setattr {target}")  # SYS_mount_setattr(AT_FDCWD, path, AT_RECURSIVE, ...)


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are written as octal escapes."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_points() -> list[str]:
    """Every mount point this process sees (/proc/self/mountinfo, field 5)."""
    try:
        with open("/proc/self/mountinfo") as f:
            return [_unescape(line.split()[4]) for line in f if len(line.split()) > 4]
    except OSError:
        return []


def submounts(source: str, points: list[str] | None = None) -> list[str]:
    """The mount points strictly inside `source` (resolved), outermost first."""
    top = os.path.realpath(source).rstrip("/") + "/"
    inside = {m for m in (mount_points() if points is None else points) if m.startswith(top) and m != top}
    return sorted(inside, key=lambda m: (m.count("/"), m))


def _remount(libc, path: str, flags_of: str, readonly: bool, extra: int = 0) -> None:
    """Remount the bind at `path` nosuid (and read-only), keeping the flags `flags_of`'s mount has locked (a
    source mounted read-only stays read-only: its flag is among the locked ones)."""
    _mount(libc, None, path, None,
           MS_BIND | MS_REMOUNT | MS_NOSUID | extra | _locked(flags_of) | (MS_RDONLY if readonly else 0))


def _bind(libc, source: str, target: str, rw: bool, inherited: list[str] | None = None) -> None:
    """Bind `source` at `target`, read-only unless `rw`. `inherited`: the mount points this namespace started with
    (only those are locked to the tree they sit in; the new root's own mounts are not)."""
    if source in RECURSIVE:  # a tree with mounts inside, which a user namespace may not split from it
        os.makedirs(target, exist_ok=True)
        _mount(libc, source, target, None, MS_BIND | MS_REC)
        try:
            _readonly_tree(libc, target)
        except OSError:  # a kernel before 5.12: no /sys at all rather than a writable one
            check(libc.umount2(target.encode(), MNT_DETACH), f"detach {target}")
        return
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o600))
    inner = submounts(source, inherited) if os.path.isdir(source) else []
    if inner:
        # A mount namespace of a user namespace may not bind a tree without what is mounted inside it (mount(2):
        # EINVAL, it would reveal what those mounts cover): /usr with the GPU driver's /usr/local/nvidia on the
        # lent GPU machines. Bound with its mounts, each made read-only too (a read-only bind stays read-only).
        _mount(libc, source, target, None, MS_BIND | MS_REC)
        if rw:
            _remount(libc, target, source, readonly=False)
            return
        try:
            _readonly_tree(libc, target)
            return
        except OSError:  # before Linux 5.12: one mount at a time; any failure aborts the isolated child
            top = os.path.realpath(source).rstrip("/")
            for path in [target] + [target + m[len(top):] for m in inner]:
                _remount(libc, path, path, readonly=True, extra=MS_NODEV)
            return
    _mount(libc, source, target, None, MS_BIND)
    _remount(libc, target, source, readonly=not rw)


def _locked(path: str) -> int:
    try:
        f = os.statvfs(path).f_flag
    except OSError:
        return 0
    return sum(ms for st, ms in _LOCKED if f & st)


def build_root(libc, p: dict) -> None:
    """In PID 1 of the new namespaces: the new root of plan `p` (`isolation.plan`), pivoted into; the working
    directory is the plan's workdir."""
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates back to the host
    inherited = mount_points()  # before any mount of ours: a source holding the new root must not take it along
    root = p["root"]
    os.makedirs(root, exist_ok=True)
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    # the private trees first: a bind inside one (a cache under the caller's /tmp or /dev/shm) lands on the child's
    # own and is not covered by it afterwards
    for d, opts in (("/tmp", "mode=1777,size=1g"), ("/dev", "mode=0755,size=1m"), ("/dev/shm", "mode=1777,size=1g")):
        os.makedirs(root + d, exist_ok=True)
        _mount(libc, "tmpfs", root + d, "tmpfs", MS_NOSUID | (0 if d == "/dev" else MS_NODEV), opts)
    # by depth, so a bind inside /tmp (the workdir) lands on the private /tmp, and a hidden directory is covered
    # before anything allowed inside it (a writable cache subdirectory) is bound on top of the cover
    ops = [(b["target"].count("/"), 0, b) for b in p["binds"] if b["target"] not in PRIVATE]
    ops += [(h.count("/"), 1, h) for h in p.get("hide", [])]
    if p.get("workdir"):
        ops.append((p["workdir"].count("/"), 0, {"source": p["workdir"], "target": p["workdir"], "rw": True}))
    covers = []
    for _, kind, op in sorted(ops, key=lambda o: (o[0], o[1])):
        if kind == 0:
            _bind(libc, op["source"], root + op["target"], op["rw"], inherited)
        elif os.path.isdir(op):
            os.makedirs(root + op, exist_ok=True)
            _mount(libc, "tmpfs", root + op, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,mode=0755")
            covers.append(root + op)  # read-only once what is allowed inside it is bound
        elif os.path.lexists(root + op):
            _mount(libc, "/dev/null", root + op, None, MS_BIND)
    for cover in covers:
        _mount(libc, None, cover, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name, target in p.get("links", {}).items():
        if not os.path.lexists(root + name):
            os.makedirs(os.path.dirname(root + name), exist_ok=True)
            os.symlink(target, root + name)
    for c in p.get("copies", []):
        os.makedirs(os.path.dirname(root + c["target"]), exist_ok=True)
        with open(c["source"], "rb") as src, open(root + c["target"], "wb") as dst:
            dst.write(src.read(1 << 20))
    for dev in p.get("devs", []):
        _bind(libc, dev, root + dev, True, inherited)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(root + "/proc", exist_ok=True)
    _mount(libc, "proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(libc, None, root, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(root)
    # pivot_root(".", "."): the old root ends up stacked under the new one and is detached right away
    check(libc.syscall(PIVOT_ROOT[os.uname().machine], b".", b"."), "pivot_root")
    check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir(p["workdir"] or "/")
