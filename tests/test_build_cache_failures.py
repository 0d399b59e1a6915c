"""A build that failed leaves nothing in the cache: the same source evaluated again fails to compile again (it once
came back as a runtime_error, 'kernel.so: cannot open shared object file', from a half-published entry)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures_loop"


def test_a_failed_build_is_not_cached(tmp_path):
    env = {**os.environ, "KFORGE_CACHE_DIR": str(tmp_path / "cache")}
    statuses = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-m", "kforge_core", "evaluate", "--problem",
                              str(FIXTURES / "problem_relu.py"), "--candidate", str(FIXTURES / "compile_error.py"),
                              "--target", "cpu", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                             env=env)
        statuses.append(json.loads(out.stdout)["status"])
    assert statuses == ["compile_error", "compile_error"]
