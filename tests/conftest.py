"""Shared fixtures. Keep this small: helpers live in tests/candidates/evalkit.py."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def kforge_cache_dir(tmp_path_factory):
    """Builds go to a private cache for the session: isolated from ~/.cache/kforge, reused within the run."""
    path = tmp_path_factory.mktemp("kforge-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("KFORGE_CACHE_DIR", str(path))
    yield path
    mp.undo()


@pytest.fixture(scope="session")
def verdicts(kforge_cache_dir, request):
    """Verdicts of the evaluation cases registered by the collected test modules (`evalkit.case`), run two at a
    time in the background from the first request on: `verdicts["name"]` waits for that case only."""
    from candidates.evalkit import REGISTRY, Batch
    from kforge_core.platform import get_platform

    get_platform("cpu", require_available=True)  # discover platforms once, before threads use the registry
    modules = {item.module.__name__ for item in request.session.items if getattr(item, "module", None)}
    batch = Batch(workers=2)
    batch.start(name for name, c in REGISTRY.items() if c.module in modules)
    yield batch
    batch.close()
