"""OS isolation of evaluation children (kforge_core.eval.isolation, docs/EVALUATOR.md): what a candidate that got past
every static rule still cannot see, write, keep running or make the caller read.

Each hostile module in candidates/hostile/iso_*.py runs as the evaluation child (spawned: ~0.5 s each, no torch).
Where namespaces are unavailable these tests skip, except the ones that hold without them (bounded reads,
redaction), and test_isolation_status_is_reported says why they are off.
"""

from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path

import pytest

from kforge_core import build_cache
from kforge_core.eval import ceilings, channels, isolation
from kforge_core.eval.child_setup import COMPILE_CACHES, cache_dir
from kforge_core.platform import REPO_ROOT
from kforge_core.eval.redaction import MARK, known_secrets, redactor
from kforge_core.eval.sandbox import LOG_LIMIT, run_child

SECRET = "sk-kforge-test-0123456789abcdef"
ISOLATED = isolation.status()[0]
needs_isolation = pytest.mark.skipif(not ISOLATED, reason=f"no OS isolation here: {isolation.status()[1]}")


def _child(module: str, request: dict, **kw):
    return run_child(request, {}, timeout_s=kw.pop("timeout_s", 60), memory_limit_mb=None, limit_address_space=False,
                     module=f"tests.candidates.hostile.{module}", **kw)


@pytest.fixture
def secrets_home(tmp_path, monkeypatch):
    """A caller with a key in its environment and in its settings file, a run store and a file in HOME."""
    home = tmp_path / "home"
    (home / ".config" / "kforge").mkdir(parents=True)
    settings = home / ".config" / "kforge" / "settings.toml"
    settings.write_text(f'[llm]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "{SECRET}"\n')
    db = home / ".local" / "share" / "kforge" / "runs.db"
    db.parent.mkdir(parents=True)
    db.write_text("the run store")
    (home / "notes.txt").write_text(SECRET)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KFORGE_SETTINGS", str(settings))
    monkeypatch.setenv("KFORGE_DB", str(db))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET + "-env")
    return {"home": home, "settings": settings, "db": db}


def test_isolation_status_is_reported():
    """Every outcome says how the child was isolated; without namespaces the reason is in the verdict's warnings."""
    out = _child("iso_outlive", {"marker": "0.01"})
    assert out.isolation == ("namespaces" if ISOLATED else f"none: {isolation.status()[1]}")
    if not ISOLATED:
        assert any("without OS isolation" in w for w in out.result["warnings"])


@needs_isolation
def test_child_sees_no_secret_of_the_caller(secrets_home):
    """The settings file (directly, or through a symlink the child makes), the run store, HOME and every other
    process's /proc/<pid>/environ are out of its reach: it is PID 1 of its own PID namespace with a fresh /proc, and
    none of those paths exists in its root. Whatever it prints is redacted besides."""
    # the caller's and its parent's environ, by their pids outside; PID 1 inside is the child itself, so a caller
    # that is (or whose parent is) PID 1 outside (a container's entry point, a runner reparented to init) names
    # the child's own environ there, which it may read
    outside = [f"/proc/{pid}/environ" for pid in {os.getpid(), os.getppid()} if pid > 1]
    paths = [str(secrets_home["settings"]), str(secrets_home["db"]), str(secrets_home["home"] / "notes.txt"),
             "/etc/shadow", *outside]
    out = _child("iso_read_secrets", {"paths": paths, "settings": str(secrets_home["settings"]),
                                      "caller_pid": os.getpid()})
    r = out.result
    assert r is not None, out.log
    leaked = {p: v for p, v in r["found"].items() if p != "environ" and v["ok"]}
    assert not leaked, leaked
    assert r["pid"] == 1 and r["procs"] == [1], r["procs"]
    assert not any(v["ok"] for v in r["found"]["environ"].values()), r["found"]["environ"]
    assert SECRET not in out.log and SECRET not in str(r)


@needs_isolation
def test_child_writes_only_its_private_directory(secrets_home):
    """The project, the settings file, the run store, the build cache (artifacts and index), the measured
    ceilings and the shared torch.compile / Triton / extension / XDG caches (which the baseline server loads code
    from) are read-only or absent (a cache under the caller's /tmp too, although the child's /tmp is writable); the
    private directory and the compile caches its environment names, its own, are writable."""
    cache = build_cache.cache_root()
    (cache / "cpu" / "k").mkdir(parents=True, exist_ok=True)
    (cache / "cpu" / "k" / "kernel.so").write_bytes(b"\x7fELF honest")
    shared = cache_dir()
    for sub in (*COMPILE_CACHES.values(), "inductor_default"):  # as the baseline server leaves them
        (shared / sub / "entry").mkdir(parents=True, exist_ok=True)
    caches = [shared / sub for sub in (*COMPILE_CACHES.values(), "inductor_default")]

    def listing():
        return sorted(str(p) for c in caches for p in c.rglob("*"))

    before = listing()
    targets = [str(REPO_ROOT / "sitecustomize.py"), str(REPO_ROOT / "kforge_core" / "evil.py"),
               str(secrets_home["settings"]), str(secrets_home["db"]), str(cache / "cpu" / "k" / "kernel.so"),
               str(cache / "index" / "cpu" / "k.json"), str(ceilings.cache_path()),
               *(str(c / "entry" / "planted.py") for c in caches)]
    try:
        out = _child("iso_write_outside", {"paths": targets, "dirs": [str(cache / "cpu" / "planted")]})
        r = out.result
        assert r is not None, out.log
        assert r["private"]["ok"], r["private"]
        assert all(v["ok"] for v in r["own_caches"].values()), r["own_caches"]
        written = {p: v for p, v in {**r["writes"], **r["mkdirs"]}.items() if v["ok"]}
        assert not written, written
        assert listing() == before
        assert not (REPO_ROOT / "sitecustomize.py").exists()
        assert "planted" not in secrets_home["settings"].read_text()
        assert (cache / "cpu" / "k" / "kernel.so").read_bytes() == b"\x7fELF honest"
    finally:
        for p in (REPO_ROOT / "sitecustomize.py", REPO_ROOT / "kforge_core" / "evil.py"):
            p.unlink(missing_ok=True)


def _running(marker: str) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry))
    return found


@needs_isolation
def test_nothing_outlives_the_evaluation():
    """A setsid daemon and a double-forked orphan die with the evaluation (its PID namespace), although the child
    returned normally and the caller never timed it out."""
    marker = f"298.{random.randrange(10**8, 10**9)}"
    out = _child("iso_outlive", {"marker": marker})
    assert out.result == {"left_running": True} or out.result.get("left_running"), out.log
    deadline = time.monotonic() + 5
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _running(marker)
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"{len(left)} process(es) outlived the evaluation"


@needs_isolation
def test_no_network():
    """The child has a network namespace of its own: the caller's app or LLM endpoint on 127.0.0.1 is unreachable."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        out = run_child({"port": server.getsockname()[1]}, {}, timeout_s=60, memory_limit_mb=None,
                        limit_address_space=False, module="tests.candidates.hostile.iso_connect")
    finally:
        server.close()
    assert out.result is not None and not out.result["connect"]["ok"], out.result


def test_caller_reads_only_what_it_opened(secrets_home):
    """Log names replaced by symlinks to the settings file and a FIFO change nothing (the caller never reopens a
    path), and descriptors grown into sparse 1.5 GB files are read as a bounded tail: the result still parses,
    the log stays small, nothing of the settings file appears."""
    start = time.monotonic()
    out = _child("iso_log_tricks", {"settings": str(secrets_home["settings"])})
    assert out.result is not None and out.result["grown"]["1"]["ok"], out.log[-500:]
    assert len(out.log) <= 2 * LOG_LIMIT + 1
    assert SECRET not in out.log and "api_key" not in out.log
    assert time.monotonic() - start < 60


def test_read_tail_is_bounded_and_regular_files_only(tmp_path):
    fd = channels.anonymous_file()
    try:
        os.ftruncate(fd, 1 << 30)
        os.pwrite(fd, b"tail", (1 << 30) - 4)
        data = channels.read_tail(fd, 100)
        assert len(data) == 100 and data.endswith(b"tail")
    finally:
        os.close(fd)
    r, w = os.pipe()
    os.write(w, b"from a pipe")
    assert channels.read_tail(r, 100) == b""  # not a regular file: nothing read, never a block
    os.close(r)
    os.close(w)


def test_redaction_of_known_secrets(secrets_home):
    """The settings file's key and credential-like environment values are replaced wherever they appear in a
    result or a log, nested values included; short values are left alone."""
    redact = redactor()
    assert redact(f"key={SECRET}!") == f"key={MARK}!"
    assert redact({"reason": [f"{SECRET}-env"], "n": 1}) == {"reason": [MARK], "n": 1}

def test_short_credential_values_are_not_redacted(monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "abc")
    assert "abc" not in known_secrets()


def test_tampered_build_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    """A published build edited on disk afterwards (another user, or a child of a fallback without isolation,
    where the cache is writable) fails its index check and is rebuilt; the index entry is written by the
    publisher, from the bytes it copied."""
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def builder(directory, **args):
        calls.append(args)
        (directory / "artifact.bin").write_bytes(b"built from " + args["source"].encode())

    monkeypatch.setattr(build_cache, "run_builder", lambda platform, d, args: builder(d, **args))
    first, cached = build_cache.cached_build("test", {"source": "A"})
    assert not cached and (first / "artifact.bin").read_bytes() == b"built from A"
    again, cached = build_cache.cached_build("test", {"source": "A"})
    assert cached and again == first and len(calls) == 1
    path = first / "artifact.bin"
    path.chmod(0o644)
    path.write_bytes(b"swapped")
    assert build_cache.lookup("test", first.name) is None
    rebuilt, cached = build_cache.cached_build("test", {"source": "A"})
    assert not cached and (rebuilt / "artifact.bin").read_bytes() == b"built from A" and len(calls) == 2


def test_publish_takes_regular_files_only(tmp_path, monkeypatch):
    """A builder's output is untrusted: a symlink to a secret or a FIFO in it is not published."""
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "kernel.so").write_bytes(b"so")
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    (out / "leak.txt").symlink_to(secret)
    os.mkfifo(out / "block.fifo")
    published = build_cache.publish("test", "k", out)
    assert sorted(p.name for p in published.iterdir()) == ["kernel.so"]
    assert build_cache.lookup("test", "k") == published


@pytest.mark.skipif(not (ISOLATED and os.geteuid() != 0) and isolation._own_pids_cgroup() is None,
                    reason="neither a pids cgroup nor RLIMIT_NPROC binds here: the kernel exempts the host's root "
                           "from RLIMIT_NPROC (docs/EVALUATOR.md)")
def test_fork_bomb_is_bounded(monkeypatch):
    """A pids cgroup per evaluation where the caller may create one (root on cgroup v1), else RLIMIT_NPROC set
    inside the evaluation's user namespace: either counts only the evaluation's own processes."""
    monkeypatch.setenv("KFORGE_EVAL_NPROC", "40")
    out = _child("iso_fork_bomb", {"attempts": 500})
    assert out.result is not None, out.log
    assert out.result["forked"] < 40 and out.result["error"], out.result


def test_ceilings_measured_in_a_child_are_stored_by_the_caller(tmp_path, monkeypatch):
    """The child's cache is read-only: ceilings it measured come back in its result and the caller stores them;
    anything but numbers and text, or one level of them (a dated measurement's `spread`), is ignored."""
    from kforge_core.eval import ceilings

    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path))
    dated = {"bandwidth_gbs": 5.0, "method": "copy", "measured_at": "2026-11-25T19:00:00+00:00",
             "spread": {"bandwidth_gbs": 0.02}, "trusted": True, "untrusted_reason": None}
    ceilings.store_reported({"cpu:Box": dated, "bad": {"x": 1}, "cpu:Nested": {"x": {"y": {"z": 1}}},
                             "cpu:List": {"x": [1, 2]}})
    assert ceilings.cached("cpu", "Box") == dated
    assert ceilings.cached("cpu", "Nested") is None and ceilings.cached("cpu", "List") is None
    assert ceilings.cached("bad", "") is None


def test_edited_cached_build_is_rebuilt_by_the_evaluator(tmp_path, monkeypatch):
    """End to end: a kernel library edited in the cache after it was published (possible where the cache is
    writable: another user, a fallback without isolation) fails its index check; the evaluation asks the caller to
    build it again instead of loading it, and the honest candidate stays correct."""
    from candidates.evalkit import HONEST, REGISTRY, case, run_case

    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "cache"))
    name = case(__name__, "edited_cache_honest", "swish_small.py", HONEST / "swish_newmodel.py")
    assert run_case(REGISTRY[name]).status == "correct"
    libraries = list((tmp_path / "cache" / "builds" / "cpu").glob("*/kernel.so"))
    assert libraries
    for so in libraries:
        so.chmod(0o644)
        so.write_bytes(b"\x7fELF not what the source builds")
    v = run_case(REGISTRY[name])
    assert v.status == "correct", f"{v.reason}\n{v.log_tail}"
    assert all(build_cache.lookup("cpu", so.parent.name) == so.parent for so in libraries)


def test_plan_never_binds_the_hosts_tmp(tmp_path, monkeypatch):
    """A caller whose script lives in /tmp has /tmp on sys.path: binding it would show the host's /tmp (other
    evaluations' directories) and hide the cache bound inside it; the child's /tmp is always its own."""
    import sys

    from kforge_core.eval.child_setup import child_plan

    monkeypatch.setattr(sys, "path", ["/tmp", "/", *sys.path])
    plan = child_plan(tmp_path / "work")
    targets = {b["target"] for b in plan["binds"]}
    assert not targets & {"/", "/tmp", "/dev", "/proc"}
    assert str(build_cache.cache_root()) in targets
