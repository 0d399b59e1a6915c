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
