"""Where KForge keeps things on disk. Torch-free: the app process and platform discovery import it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Build, compile and measurement caches: `$KFORGE_CACHE_DIR`, default `~/.cache/kforge`."""
    return Path(os.environ.get("KFORGE_CACHE_DIR") or Path.home() / ".cache" / "kforge")
