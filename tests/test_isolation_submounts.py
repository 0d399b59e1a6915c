"""A tree the new root binds may have file systems mounted inside it: on the lent GPU machines the driver's
/usr/local/nvidia is a read-only squashfs inside /usr. A mount namespace owned by a user namespace may not bind such
a tree without its mounts (mount(2): EINVAL, it would reveal what they cover), so a plain bind of /usr failed there
and every evaluation ran without isolation ("mount /usr on ...: Invalid argument"). The tree is now bound with its
mounts, all of them read-only.

Reproduced here on one machine: a script enters a mount namespace of its own, mounts a tmpfs inside a directory,
and builds an isolated child's root (`isolation.enter`) that binds that directory read-only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from kforge_core.eval import isolation
from kforge_core.eval.new_root import submounts
from kforge_core.platform import REPO_ROOT

ISOLATED = isolation.status()[0]

SCRIPT = textwrap.dedent(r"""
    import ctypes, errno, json, os, sys
    from pathlib import Path
    from kforge_core.eval import isolation

    tree, workdir = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:  # as on a kernel before 5.12: no mount_setattr, each mount of the tree remounted instead
        from kforge_core.eval import new_root

        def _no_mount_setattr(libc, target):
            raise OSError(38, "mount_setattr: Function not implemented")
        new_root._readonly_tree = _no_mount_setattr
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWNS, CLONE_NEWUSER, MS_REC, MS_PRIVATE = 0x20000, 0x10000000, 16384, 1 << 18
    uid, gid = os.getuid(), os.getgid()
    # our own mount namespace (inside a user namespace of our own when not root), so the tmpfs stays ours
    if libc.unshare(CLONE_NEWNS | (0 if uid == 0 else CLONE_NEWUSER)) != 0:
        print(json.dumps({"skip": "unshare: " + os.strerror(ctypes.get_errno())})); sys.exit(0)
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    assert libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0, os.strerror(ctypes.get_errno())
    sub = os.path.join(tree, "mounted")
    if libc.mount(b"tmpfs", sub.encode(), b"tmpfs", 0, b"size=1m") != 0:
        print(json.dumps({"skip": "mount tmpfs: " + os.strerror(ctypes.get_errno())})); sys.exit(0)
    Path(sub, "inside.txt").write_text("from the inner mount")

    plan = isolation.plan(Path(workdir), readonly=[tree], writable=[], hide=[], nproc=64, fsize_mb=16)
    pid = os.fork()
    if pid == 0:
        try:
            isolation.enter(plan)  # the relay never returns; PID 1 of the new namespaces does, in the new root
        except BaseException as e:
            Path(workdir, "result.json").write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
            os._exit(3)
        found = {"inner_file": None, "writes": {}}
        try:
            found["inner_file"] = Path(sub, "inside.txt").read_text()
        except OSError as e:
            found["inner_file"] = f"unreadable: {e}"
        for where in (os.path.join(tree, "new.txt"), os.path.join(sub, "new.txt"),
                      os.path.join(sub, "inside.txt")):
            try:
                with open(where, "a") as f:
                    f.write("x")
                found["writes"][where] = "written"
            except OSError as e:
                found["writes"][where] = errno.errorcode.get(e.errno, str(e.errno))
        Path(workdir, "result.json").write_text(json.dumps(found))
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}))
""")


def test_submounts_are_found_from_mountinfo():
    points = ["/", "/usr", "/usr/local/nvidia", "/usr/local/nvidia/lib", "/usrx", "/proc"]
    assert submounts("/usr", points) == ["/usr/local/nvidia", "/usr/local/nvidia/lib"]
    assert submounts("/usr/local/nvidia", points) == ["/usr/local/nvidia/lib"]
    assert submounts("/opt", points) == []


@pytest.mark.skipif(not ISOLATED, reason=f"no OS isolation here: {isolation.status()[1]}")
@pytest.mark.parametrize("kernel,workdir_inside", [("mount_setattr", False), ("before 5.12", False),
                                                    ("mount_setattr", True)])
def test_a_tree_with_a_mount_inside_is_bound_whole_and_read_only(tmp_path, kernel, workdir_inside):
    """workdir_inside: the private directory (and so the new root, beside it) inside the bound tree, as when a
    project under /tmp is on sys.path: the new root's own mounts must not be taken for the tree's."""
    tree = tmp_path / "tree"
    workdir = tree / "work" if workdir_inside else tmp_path / "work"
    (tree / "mounted").mkdir(parents=True)
    workdir.mkdir()
    (tree / "outer.txt").write_text("outer")
    args = [str(tree), str(workdir)] + (["no-mount-setattr"] if kernel == "before 5.12" else [])
    run = subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=REPO_ROOT, text=True,
                         capture_output=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    last = json.loads(run.stdout.strip().splitlines()[-1])
    if "skip" in last:
        pytest.skip(f"cannot mount inside a namespace here: {last['skip']}")
    # before the fix the child died building its root: "kforge isolation: OSError: [Errno 22] mount ... Invalid
    # argument" (EINVAL) on stderr, exit 71
    assert (workdir / "result.json").exists(), f"no isolated child ran (exit {last['exit']}): {run.stderr[-2000:]}"
    found = json.loads((workdir / "result.json").read_text())
    assert "error" not in found, found
    assert last["exit"] == 0, (last, found)
    assert found["inner_file"] == "from the inner mount"
    assert set(found["writes"].values()) == {"EROFS"}, found["writes"]
    assert (tree / "outer.txt").read_text() == "outer"
