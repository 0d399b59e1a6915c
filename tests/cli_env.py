"""The environment for running the CLI as a subprocess in tests (`python -m kforge_core ...`)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What would point a test's subprocess at the developer's endpoint, key, models or run store.
USER_LLM_ENV = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL", "KFORGE_ANALYSIS_MODEL", "KFORGE_DB")


def cli_env(tmp_path: Path) -> dict[str, str]:
    """This process's environment minus the user's endpoint, key, models and store; a settings file that does not
    exist (under `tmp_path`); the repository on PYTHONPATH."""
    values = {k: v for k, v in os.environ.items() if k not in USER_LLM_ENV}
    values.update(KFORGE_SETTINGS=str(tmp_path / "no-settings.toml"), PYTHONPATH=str(REPO))
    return values


def start_bench(command: list[str], tmp_path: Path):
    """Start `bench` as a terminal would (SIGINT reaches it: neither ignored nor blocked, whatever the test
    runner's own process inherited; in the full CI run the bench once never saw the signal)."""
    import signal
    import subprocess

    def terminal_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    return subprocess.Popen(command, env=cli_env(tmp_path), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint)


def interrupt_after_first_record(proc, progress: Path, timeout_s: float = 300) -> str:
    """Ctrl-C `proc` once the bench has recorded a problem in `progress`; return its stderr."""
    import signal
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.exists() and progress.read_text().count("\n") >= 1:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "bench finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=120)[1]
