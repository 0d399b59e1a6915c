"""Builds cached by content hash, published by a trusted process, checked against a parent-owned index before use.

Layout under $KFORGE_CACHE_DIR/builds/:
  <platform>/<key>/          whatever the platform's builder produced (read-only to evaluation children)
  index/<platform>/<key>.json  {"files": {name: sha256}} written by the process that published the build

Who builds: an evaluation child never writes the cache (it is mounted read-only in its namespace). On a miss it
asks the caller over its build channel (`kforge_core.eval.build_service`); the caller runs the registered builder
(`BUILDERS`) on the request's arguments in a fresh sandboxed child that runs no candidate code, hashes what that
child produced (regular files only, read by descriptor), and publishes it with its index entry. The key is computed
from the arguments by whoever builds, so an entry always holds what its arguments build: a candidate can make the
cache hold builds of its own sources, never swap the build of someone else's.

Before a cached build is used, every file in its index entry is hashed again (`lookup`): a build edited on disk (by
another user, or a child of a fallback without isolation, where the cache is writable) is rebuilt, not loaded.
Without a build channel (a trusted process building for itself: tests, the app's own measurements) `cached_build`
builds in-process and publishes directly when the cache is writable, else into a private directory (under this
process's temporary directory, `kforge_core.tempdirs`: it lasts until the process exits).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from . import tempdirs
from .errors import CompileError
from .paths import cache_dir

# platform -> "module:function"; the function is called as fn(directory, **args) and fills `directory`
BUILDERS = {
    "cpu": "platforms.cpu:build_library",
    "load_inline": "kforge_core.eval.harness.inline_cache:build_extension",
    "cuda": "platforms.cuda._nvrtc:build_image",
}
_channel: Callable[[str, dict], Path] | None = None  # set in an evaluation child: asks the caller to build


def cache_root() -> Path:
    root = cache_dir() / "builds"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:  # read-only in an evaluation child: it exists, the caller made it
        pass
    return root


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:24]


def key_for(platform: str, args: dict) -> str:
    """Arguments whose names start with "_" are context (the candidate's text, for mapping diagnostics to its
    lines), not part of what is built."""
    return digest(platform, json.dumps({k: v for k, v in args.items() if not k.startswith("_")}, sort_keys=True, default=str))


def file_hash(fd: int) -> str:
    h = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        h.update(chunk)
    return h.hexdigest()


def _index_path(platform: str, key: str) -> Path:
    return cache_root() / "index" / platform / f"{key}.json"


def lookup(platform: str, key: str) -> Path | None:
    """The published build for `key` if every file matches its index entry; None otherwise (never built, or
    changed on disk since it was published)."""
    directory = cache_root() / platform / key
    try:
        files = json.loads(_index_path(platform, key).read_text())["files"]
        for name, want in files.items():
            fd = os.open(directory / name, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                if file_hash(fd) != want:
                    return None
            finally:
                os.close(fd)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return directory if files else None


def publish(platform: str, key: str, source_dir: Path, max_bytes: int = 1 << 30) -> Path:
    """Copy the regular files at the top of `source_dir` (a builder's output, untrusted: no symlinks followed, no
    special files, bounded size) into the cache as `key`, and write its index entry. Returns the published dir."""
    final = cache_root() / platform / key
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=final.parent))
    hashes: dict[str, str] = {}
    total = 0
    try:
        dfd = os.open(source_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for name in sorted(os.listdir(dfd)):
                try:
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
                except OSError:
                    continue  # a symlink (ELOOP) or something unreadable: not part of a build
                try:
                    st = os.fstat(fd)
                    if not (st.st_mode & 0o170000 == 0o100000):
                        continue
                    total += st.st_size
                    if total > max_bytes:
                        raise CompileError(f"the build produced more than {max_bytes >> 20} MiB")
                    h = hashlib.sha256()
                    with open(tmp / name, "wb") as out:
                        while chunk := os.read(fd, 1 << 20):
                            h.update(chunk)
                            out.write(chunk)
                    hashes[name] = h.hexdigest()
                finally:
                    os.close(fd)
        finally:
            os.close(dfd)
        for p in tmp.iterdir():
            p.chmod(0o444 if not os.access(p, os.X_OK) else 0o555)
        index = _index_path(platform, key)
        index.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            if lookup(platform, key) is not None:  # published meanwhile by another evaluation: theirs is as good
                shutil.rmtree(tmp, ignore_errors=True)
                return final
            shutil.rmtree(final, ignore_errors=True)  # an entry that failed its check: replaced
        try:
            os.rename(tmp, final)
        except OSError:  # another process published the same build first: theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
            if lookup(platform, key) is not None:
                return final
            raise
        itmp = index.with_suffix(f".{os.getpid()}.tmp")
        itmp.write_text(json.dumps({"files": hashes}))
        itmp.replace(index)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def run_builder(platform: str, directory: Path, args: dict) -> None:
    module, function = BUILDERS[platform].split(":")
    getattr(importlib.import_module(module), function)(directory, **args)


def cached_build(platform: str, args: dict) -> tuple[Path, bool]:
    """Return (directory, was_cached) for the build of `args` by the platform's registered builder. Raises
    CompileError when the build fails."""
    key = key_for(platform, args)
    found = lookup(platform, key)
    if found is not None:
        return found, True
    if _channel is not None:
        return _channel(platform, args), False
    tmp = tempdirs.make(f"build-{key}-")
    try:
        run_builder(platform, tmp, args)
        if os.access(cache_root(), os.W_OK):
            return publish(platform, key, tmp), False
        private = tempdirs.make(f"build-{key}-")  # not shared: nothing to publish into
        shutil.copytree(tmp, private, dirs_exist_ok=True)
        return private, False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
