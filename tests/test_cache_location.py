"""Where the cache (`KFORGE_CACHE_DIR`) may live: anywhere KForge can make and write a directory of its own, inside
the project or a script's directory (both on the caller's sys.path and bound read-only in an isolated child), named
by a relative path or through a symlink; a directory that cannot work is refused before any child starts, with a
message naming the variable.

The bug: a cache under a tree the child is given read-only (the project, sys.path) was covered with the empty mount
that hides the cache directory, its builds with it (they "came with" the tree, so were not bound on their own): every
build the caller published failed the child's check, "the published build does not match its index entry". A
relative path named another directory in each child (its working directory is its own).

Real evaluations (`python -m kforge_core evaluate`, the CPU example, which builds a kernel library through the
cache), each in a fresh process with its own cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kforge_core import paths
from kforge_core.platform import REPO_ROOT

EXAMPLE = REPO_ROOT / "platforms" / "examples" / "cpu"
EVALUATE = ["evaluate", "--problem", str(EXAMPLE / "problem.py"), "--candidate", str(EXAMPLE / "candidate.py"),
            "--target", "cpu", "--no-baselines", "--no-timing", "--json"]


def _evaluate(argv: list[str], cwd: Path, cache: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "KFORGE_CACHE_DIR": cache, "KFORGE_DB": str(tmp_path / "store" / "runs.db"),
           "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, *argv, *EVALUATE], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _verdict(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stdout + out.stderr
    verdict = json.loads(out.stdout)
    assert verdict["status"] == "correct", f"{verdict['status']}: {verdict['reason']}\n{verdict.get('log_tail')}"
    return verdict


def _published(cache: Path) -> list[Path]:
    return list((cache / "builds" / "index" / "cpu").glob("*.json"))


def test_relative_cache_inside_the_project(tmp_path):
    """`python -m kforge_core` from the project root with a relative cache folder in the project (as
    `./.kforge-cache`): the project is on sys.path and bound read-only in the child, the path is relative."""
    name = f"kforge-cache-{uuid.uuid4().hex[:8]}"
    where = REPO_ROOT / "test-artifacts"  # gitignored, like .kforge-cache (not used here: a developer's own cache)
    existed = where.exists()
    try:
        _verdict(_evaluate(["-m", "kforge_core"], REPO_ROOT, f"test-artifacts/{name}", tmp_path))
        assert _published(where / name)  # published where the caller was pointed, not in a child's directory
    finally:
        shutil.rmtree(where / name, ignore_errors=True)
        if not existed:
            shutil.rmtree(where, ignore_errors=True)


def test_cache_in_the_scripts_directory_and_through_a_symlink(tmp_path):
    """A script's own directory is sys.path[0]: a cache inside it, named relatively, then one named through a
    symlink inside that directory to a folder elsewhere (a mount through it landed outside the child's root)."""
    project = tmp_path / "project"
    project.mkdir()
    script = project / "run_kforge.py"
    script.write_text("import runpy\nrunpy.run_module('kforge_core', run_name='__main__')\n")
    _verdict(_evaluate([str(script)], project, ".kforge-cache", tmp_path))
    assert _published(project / ".kforge-cache")
    (tmp_path / "elsewhere").mkdir()
    (project / "linked").symlink_to(tmp_path / "elsewhere")
    _verdict(_evaluate([str(script)], project, str(project / "linked" / "cache"), tmp_path))
    assert _published(tmp_path / "elsewhere" / "cache")


def test_cache_that_cannot_work_is_refused_naming_the_variable(tmp_path):
    """The project's directory itself (its folders would mix with the project's, and an empty `triton` folder on
    the import path is imported as the triton package) and a path that cannot be made: refused before any child
    starts, one line naming KFORGE_CACHE_DIR, exit code 2."""
    out = _evaluate(["-m", "kforge_core"], REPO_ROOT, ".", tmp_path)
    assert out.returncode == 2 and "KFORGE_CACHE_DIR='.'" in out.stderr and "project's directory" in out.stderr, \
        out.stderr
    assert not (REPO_ROOT / "triton").exists() and not (REPO_ROOT / "builds").exists()
    (tmp_path / "a-file").write_text("")
    out = _evaluate(["-m", "kforge_core"], tmp_path, str(tmp_path / "a-file"), tmp_path)
    assert out.returncode == 2 and "KFORGE_CACHE_DIR=" in out.stderr and "cannot make the cache directory" in \
        out.stderr, out.stderr


def test_cache_dir_is_absolute_and_resolved(tmp_path, monkeypatch):
    """The caller, its children (each in a working directory of its own) and the child's new root (binds at this
    path) must name one directory."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KFORGE_CACHE_DIR", "link/cache")
    assert paths.cache_dir() == tmp_path / "real" / "cache"
    monkeypatch.setenv("KFORGE_CACHE_DIR", "~/kforge-cache")
    assert paths.cache_dir() == Path(os.path.realpath(Path.home() / "kforge-cache"))


@pytest.mark.parametrize("inside", ["project", "store"])
def test_plan_binds_the_builds_of_a_hidden_cache_inside_a_bound_tree(tmp_path, monkeypatch, inside):
    """The plan: a cache under a tree the child is given read-only (here a sys.path directory; or under the run
    store's directory, hidden too) is covered, and its builds and ceilings are bound on their own on top (read-only);
    the shared compile caches are not bound at all (the child's are its own, in its private /tmp)."""
    from kforge_core import build_cache
    from kforge_core.eval import ceilings
    from kforge_core.eval.child_setup import child_plan

    project = tmp_path / "project"
    (project / "store").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(project), *sys.path])
    monkeypatch.setenv("KFORGE_DB", str(project / "store" / "runs.db"))
    cache = project / ".kforge-cache" if inside == "project" else project / "store" / "cache"
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(cache))
    plan = child_plan(tmp_path / "work")
    binds = {b["target"]: b for b in plan["binds"]}
    assert str(cache) in plan["hide"]
    for needed in (build_cache.cache_root(), ceilings.cache_path().parent):
        assert str(needed) in binds and not binds[str(needed)]["rw"]
    assert not any(b["rw"] for b in plan["binds"]), [b for b in plan["binds"] if b["rw"]]
    assert str(cache / "inductor") not in binds and str(cache / "triton") not in binds


def test_a_run_refuses_such_a_cache_before_its_first_generation(tmp_path, monkeypatch):
    """A run (the loop, with the real evaluator) stops at once, failed with the message, before asking the model."""
    from tests.fakes.openai_server import FakeOpenAIServer
    from tests.loop_fixtures import make_config, of_kind, run_to_end

    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL", "KFORGE_ANALYSIS_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KFORGE_SETTINGS", str(tmp_path / "no-settings.toml"))
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(REPO_ROOT))
    with FakeOpenAIServer(models=("gen-model", "ana-model")) as server:
        _, _, summary, events = run_to_end(tmp_path / "runs.db", make_config(server))
        assert not server.chat_requests
    assert summary["status"] == "failed"
    (error,) = of_kind(events, "error")
    assert "KFORGE_CACHE_DIR" in error["data"]["message"] and "project's directory" in error["data"]["message"]
