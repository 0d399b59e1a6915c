"""KForge's temporary directories (kforge_core.tempdirs): one directory per process under TMPDIR, removed at a normal
exit with the fork servers, pools and baseline servers closed first; a killed process's directory swept by the next
process, never a live one's. Regression: the dev box had 2138 /tmp/kforge-forkserver-* and ~430 kforge-eval-* /
kforge-baseline-* directories (fork servers never removed theirs, nothing closed them at exit, and a killed
process's directories stayed for good).

Every test has a private TMPDIR (`private_tmp`), in this process and in the processes it starts: none touches the
real /tmp or another test's directories.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from kforge_core import tempdirs
from kforge_core.eval import isolation
from kforge_core.platform import REPO_ROOT



@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() caches its answer: read TMPDIR again
    assert tempfile.gettempdir() == str(root)
    return root


def _python(code: str, **kw) -> subprocess.Popen:
    """A KForge process (real: its own atexit, its own pid) running `code`, with this test's TMPDIR."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO_ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _run(code: str) -> str:
    proc = _python(code)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return out


def _kforge_entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if "kforge" in p.name)


def _stale_name(pid: int, process_part: str = "0123456789") -> str:
    """A directory name of this PID namespace for `pid`, with a token that is not that process's."""
    return f"kforge-{pid}-{tempdirs.token(os.getpid())[:6]}{process_part}-abcd1234"


def test_a_process_that_evaluates_and_exits_leaves_nothing(private_tmp):
    """A fork server (and its pool's pre-started children, each with a directory and an isolation root) and a
    spawned evaluation child. A retired server is closed at once: its zygote waited for (it writes its log in its
    directory until it is gone), then its directory removed. At a normal exit the next server is closed the same
    way, then the process's directory goes. The build cache, although under TMPDIR here, stays."""
    cache = private_tmp / "kforge-cache"
    (cache / "builds" / "cpu" / "k").mkdir(parents=True)
    (cache / "builds" / "cpu" / "k" / "kernel.so").write_bytes(b"a cached build")
    out = _run(f"""
        import json, os, tempfile
        from pathlib import Path
        os.environ["KFORGE_CACHE_DIR"] = {str(cache)!r}
        from kforge_core import tempdirs
        from kforge_core.eval import child_setup, forkserver, warm_pool
        from kforge_core.eval.sandbox import run_child

        isolated = child_setup.isolation_status()[0]
        server = forkserver.get(child_setup.child_environment(Path(tempfile.gettempdir()), isolated))
        server.pool.take(warm_pool.Spec.of("cpu", None, False, isolated))  # starts two children in the background
        warm_pool.settle()
        out = run_child({{"seconds": 0}}, {{"a.txt": "x"}}, timeout_s=60, memory_limit_mb=None,
                        limit_address_space=False, module="tests.candidates.sandbox.waiter")
        seen = {{"parent": str(tempdirs.parent()), "server": str(server.dir),
                "inside": sorted(p.name for p in tempdirs.parent().iterdir()),
                "waiting": len(server.pool.waiting()), "returncode": out.returncode}}
        forkserver.retire(server)  # idle: closed now, as after a runaway
        seen["closed"] = {{"dir": server.dir.exists(), "zygote_exit": server.proc.returncode,
                          "pool": warm_pool.STATS["discarded"]}}
        seen["zygote"] = forkserver.get(child_setup.child_environment(Path(tempfile.gettempdir()), isolated)).proc.pid
        print(json.dumps(seen))  # the new server is left to the exit
    """)
    seen = json.loads(out)
    assert seen["returncode"] == 0
    assert seen["closed"]["dir"] is False and seen["closed"]["zygote_exit"] is not None, seen["closed"]
    assert Path(seen["parent"]).parent == private_tmp and Path(seen["server"]).parent == Path(seen["parent"])
    assert any(name.startswith("forkserver-") for name in seen["inside"]), seen["inside"]
    if seen["waiting"]:  # pre-started children: their directories are under the same parent
        assert sum(name.startswith("eval-") for name in seen["inside"]) >= seen["waiting"], seen["inside"]
    assert _kforge_entries(private_tmp) == ["kforge-cache"]
    assert (cache / "builds" / "cpu" / "k" / "kernel.so").read_bytes() == b"a cached build"
    assert not Path(f"/proc/{seen['zygote']}").exists() or _state(seen["zygote"]) == "Z"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def test_a_killed_process_leaves_its_directory_and_the_next_process_sweeps_it(private_tmp):
    """SIGKILL mid-evaluation: nothing of the process runs any more, its directory (with the evaluation's) stays;
    the next process's first temporary directory sweeps it, and that process leaves nothing at its own exit."""
    victim = _python("""
        from kforge_core.eval.sandbox import run_child
        run_child({"seconds": 120}, {"candidate.py": "x = 1"}, timeout_s=300, memory_limit_mb=None,
                  limit_address_space=False, module="tests.candidates.sandbox.waiter",
                  on_start=lambda pid: print("started", flush=True))
    """)
    try:
        assert victim.stdout.readline().strip() == "started", victim.stderr.read()[-3000:]
    finally:
        victim.kill()
        victim.wait()
    left = [p for p in private_tmp.iterdir() if p.name.startswith(f"kforge-{victim.pid}-")]
    assert len(left) == 1, _kforge_entries(private_tmp)
    assert any(p.name.startswith("eval-") and (p / "candidate.py").exists() for p in left[0].iterdir())

    out = _run("""
        from kforge_core import tempdirs
        print(tempdirs.make("eval-"))
    """)
    assert Path(out.strip()).parent.parent == private_tmp
    assert not left[0].exists()
    assert _kforge_entries(private_tmp) == []


def test_a_live_process_directory_is_never_swept(private_tmp):
    """A process that is still running keeps its directory while others start, sweep and exit; it removes its own
    when it exits."""
    live = _python("""
        import sys
        from kforge_core import tempdirs
        print(tempdirs.make("eval-"), flush=True)
        sys.stdin.readline()
    """)
    try:
        workdir = Path(live.stdout.readline().strip())
        assert workdir.is_dir(), live.stderr.read()[-3000:]
        _run("""
            from kforge_core import tempdirs
            tempdirs.make("eval-")
        """)
        removed = tempdirs.sweep(private_tmp)  # and this process's sweep
        assert workdir.is_dir() and workdir.parent not in removed
    finally:
        live.communicate("\n", timeout=60)
    assert live.returncode == 0
    assert not workdir.parent.exists()


def test_a_reused_pid_is_treated_as_gone(private_tmp):
    """A directory whose pid runs now, but another process than the one that made it (another start time, so
    another token), is swept; the running process's own directory is not."""
    reused = private_tmp / _stale_name(os.getpid())
    (reused / "eval-x").mkdir(parents=True)
    mine = tempdirs.parent()
    assert mine.name.startswith(f"kforge-{os.getpid()}-{tempdirs.token(os.getpid())}-")
    assert not reused.exists()  # the first directory in this TMPDIR swept it
    assert mine.is_dir()

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        token = tempdirs.token(sleeper.pid)
        assert token is not None and token != tempdirs.token(os.getpid())
        assert token[:6] == tempdirs.token(os.getpid())[:6]  # the same PID namespace
    finally:
        sleeper.kill()
        sleeper.wait()
    assert tempdirs.token(sleeper.pid) is None


def test_what_the_sweep_never_removes(private_tmp, monkeypatch):
    """Only stale `kforge-<pid>-<token>-*` directories of this user and PID namespace go: not a symlink (nor what it
    points to), not an older KForge's directory, not another namespace's, not one with a mount point inside (an
    isolated child's view of its caller's directory), not another user's."""
    target = private_tmp / "precious"
    target.mkdir()
    (target / "f").write_text("keep")
    dead = subprocess.Popen(["true"])
    dead.wait()
    (private_tmp / _stale_name(dead.pid)).symlink_to(target)
    (private_tmp / "kforge-eval-abcd1234").mkdir()  # an older version's: its process may still be running
    (private_tmp / f"kforge-{dead.pid}-ffffff0123456789-abcd1234").mkdir()  # another PID namespace
    mounted = private_tmp / _stale_name(dead.pid, "1111111111")
    (mounted / "eval-x").mkdir(parents=True)
    stale = private_tmp / _stale_name(dead.pid, "2222222222")
    (stale / "eval-y").mkdir(parents=True)
    owned_by_other = private_tmp / _stale_name(dead.pid, "3333333333")
    if os.geteuid() == 0:  # only root can make one here
        owned_by_other.mkdir()
        os.chown(owned_by_other, 65534, 65534)
    from kforge_core.eval import new_root

    monkeypatch.setattr(new_root, "mount_points", lambda: ["/", str(mounted / "eval-x")])

    removed = tempdirs.sweep(private_tmp)

    assert set(removed) == {stale} and not stale.exists()
    assert (target / "f").read_text() == "keep"
    assert (private_tmp / _stale_name(dead.pid)).is_symlink()
    assert (mounted / "eval-x").is_dir()
    assert (private_tmp / "kforge-eval-abcd1234").is_dir()
    assert (private_tmp / f"kforge-{dead.pid}-ffffff0123456789-abcd1234").is_dir()
    assert owned_by_other.is_dir() == (os.geteuid() == 0)


def test_servers_close_before_the_directory_goes_and_a_forked_child_removes_nothing(private_tmp):
    """at_exit closers run while the directories still exist (a server writes its log there until it is gone),
    one that raises stops nothing; a forked child that exits (atexit runs there too) removes its own directory and
    leaves its parent's."""
    out = _run("""
        import os
        from kforge_core import tempdirs
        d = tempdirs.make("baseline-")
        def boom():
            raise RuntimeError("a close that failed")
        tempdirs.at_exit(lambda: print("closer sees its directory:", d.is_dir()))
        tempdirs.at_exit(boom)
        pid = os.fork()
        if pid == 0:
            print("the child's own:", tempdirs.make("eval-"), flush=True)
            raise SystemExit(0)  # runs atexit here too
        os.waitpid(pid, 0)
        print("after the forked child:", d.is_dir())
    """)
    assert "after the forked child: True" in out
    assert "closer sees its directory: True" in out
    childs = Path(out.split("the child's own: ")[1].split()[0])
    assert childs.parent.parent == private_tmp and not childs.parent.exists()  # made and removed by the child
    assert _kforge_entries(private_tmp) == []


def test_tmpdir_is_respected_and_each_root_gets_its_own_directory(private_tmp, monkeypatch):
    first = tempdirs.make("eval-")
    assert first.parent.parent == private_tmp and oct(first.parent.stat().st_mode & 0o777) == "0o700"
    other = private_tmp / "other"
    other.mkdir()
    monkeypatch.setenv("TMPDIR", str(other))
    monkeypatch.setattr(tempfile, "tempdir", None)
    assert tempdirs.make("eval-").parent.parent == other
    assert first.is_dir()


def test_an_isolated_child_sees_no_sibling_directory(private_tmp):
    """Moving every workdir under one parent must not show a candidate the others: in its new root the parent holds
    its own directory only (not the fork server's, not another evaluation's), a sibling's file cannot be read by
    its path, and a sweep run inside the child removes nothing of its own directory or of the caller's."""
    from kforge_core.eval.sandbox import run_child

    isolated, why_not = isolation.status()  # probed here, not at import: its directory goes to the private TMPDIR
    if not isolated:
        pytest.skip(f"no OS isolation here: {why_not}")

    sibling = tempdirs.make("eval-")
    (sibling / "candidate.py").write_text("another evaluation's candidate")
    out = run_child({"paths": [str(sibling / "candidate.py")]}, {}, timeout_s=60, memory_limit_mb=None,
                    limit_address_space=False, module="tests.candidates.hostile.iso_tmp_siblings")
    r = out.result
    assert r is not None, out.log
    assert Path(r["cwd"]).parent == tempdirs.parent()
    assert r["listing"] == {"ok": True, "value": [Path(r["cwd"]).name]}, r["listing"]
    assert not any(v["ok"] for v in r["reads"].values()), r["reads"]
    assert r["swept"] == {"ok": True, "value": []}, r["swept"]
    assert r["mine"] == {"ok": True, "value": "mine"}, r["mine"]
    assert (sibling / "candidate.py").read_text() == "another evaluation's candidate"
