"""What the run store tests share: a store on a fresh SQLite file in tmp_path, a run in it, event sequence numbers, the
migrations a file has applied.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kforge_core.store import RunStore, open_store
from kforge_core.store.migrations import MIGRATION_SET


@pytest.fixture
def store(tmp_path: Path):
    with open_store(tmp_path / "runs.db") as s:
        yield s


def make_run(store: RunStore, name: str = "matmul", target: str = "cpu", **kw) -> str:
    return store.create_run(name, f"# source of {name}\n", target, **kw)


def seqs(events: list[dict]) -> list[int]:
    return [e["seq"] for e in events]


def applied(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute(
            "SELECT name FROM _sqlite_migrations WHERE migration_set = ? ORDER BY id", [MIGRATION_SET])]
