"""The Dockerfile, read as text (no Docker engine here): the torch it installs is the tested one, an init process
reaps the app's workers, and the user that runs generated code cannot write the sources."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = (REPO / "Dockerfile").read_text()
LINES = [line for line in DOCKERFILE.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _pinned_torch() -> str:
    m = re.search(r"^torch==(\S+)", (REPO / "requirements.txt").read_text(), flags=re.M)
    assert m, "requirements.txt pins torch"
    return m.group(1)


def test_image_installs_the_tested_torch():
    # every install line that names torch names the pinned version, and requirements.txt itself is installed
    # (a base image's own torch would be kept otherwise)
    version = _pinned_torch()
    for line in LINES:
        for pin in re.findall(r"torch==([0-9][0-9A-Za-z.+]*[0-9A-Za-z])", line):
            assert pin == version, line
    assert any(re.search(r"pip install -r requirements\.txt\b", line) for line in LINES)
    assert not any("grep -v" in line and "torch" in line for line in LINES), "torch must not be filtered out"


def test_init_process_is_pid_1():
    entry = [line for line in LINES if line.startswith("ENTRYPOINT")]
    assert entry and "tini" in entry[-1], "an init (tini) must reap finished worker processes"
    assert any("tini" in line and "apt-get install" in line for line in LINES)


def test_sources_are_not_writable_by_the_runtime_user():
    copies = [line for line in LINES if line.startswith("COPY")]
    assert copies and not any("--chown" in line for line in copies), copies
    user_at = max(i for i, line in enumerate(LINES) if line.startswith("USER"))
    assert LINES[user_at].split()[1] not in ("root", "0")
    assert any("a-w" in line for line in LINES[:user_at]), "the copied sources are made read-only"


def test_readme_says_the_runtime_image_has_no_nvcc():
    readme = (REPO / "README.md").read_text()
    docker = readme[readme.index("docker build"):]
    assert "nvcc" in docker[:1500] and "load_inline" in docker[:1500]
