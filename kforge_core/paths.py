"""Where KForge keeps things on disk. Torch-free: the app process and platform discovery import it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Build, compile and measurement caches: `$KFORGE_CACHE_DIR`, default `~/.cache/kforge`; absolute and resolved
    (symlinks followed), so that the caller, its children (whose working directory is their own) and an isolated
    child's new root, where the cache's directories are bound at this path, all name the same directory."""
    raw = os.environ.get("KFORGE_CACHE_DIR")
    return Path(os.path.realpath(Path(raw).expanduser() if raw else Path.home() / ".cache" / "kforge"))
