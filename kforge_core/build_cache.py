"""Builds cached by content hash, published atomically so concurrent evaluations never see half a build.

Layout: $KFORGE_CACHE_DIR/builds/<platform>/<hash>/ holding whatever the platform's compiler produced. A build is
complete once its directory exists under its final name (a temp directory is renamed into place).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from .paths import cache_dir


def cache_root() -> Path:
    root = cache_dir() / "builds"
    root.mkdir(parents=True, exist_ok=True)
    return root


def digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:24]


def cached_build(platform: str, key: str, build: Callable[[Path], None]) -> tuple[Path, bool]:
    """Return (directory, was_cached). `build(tmpdir)` fills a fresh directory; raising leaves no trace."""
    final = cache_root() / platform / key
    if final.is_dir():
        return final, True
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # another process published the same build first: theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, False
