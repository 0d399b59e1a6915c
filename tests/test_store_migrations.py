"""Run store migrations: idempotent, every older schema upgraded to exactly a fresh one's, data kept, a
newer schema refused.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from sqlite_utils import Database, Migrations

import pytest

from kforge_core.store import SchemaTooNew, open_store
from kforge_core.store.db import connect
from kforge_core.store.migrations import KNOWN, MIGRATION_SET, MIGRATIONS, m001_initial, migrate
from tests.store_fixtures import applied, make_run, store  # noqa: F401 - pytest fixtures


def schema(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "WHERE name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()


def test_migrations_idempotent(tmp_path: Path):
    path = tmp_path / "runs.db"
    for _ in range(3):
        open_store(path).close()
    assert applied(path) == KNOWN and KNOWN[0] == "m001_initial"
    db = connect(path)
    assert migrate(db) == []
    db.close()


@pytest.mark.parametrize("stop_before", KNOWN)
def test_upgrade_from_each_older_schema(tmp_path: Path, stop_before: str):
    """A database left at any earlier migration upgrades to exactly the schema of a fresh one."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    open_store(fresh).close()
    with Database(old) as db:
        MIGRATIONS.apply(db, stop_before=stop_before)
    with open_store(old) as s:
        make_run(s)
    assert schema(old) == schema(fresh)
    assert applied(old) == KNOWN


def test_upgrade_keeps_data_and_newer_schema_is_refused(tmp_path: Path):
    """Simulate the next release: the current schema plus a future migration, applied to a populated file."""
    path = tmp_path / "runs.db"
    with open_store(path) as s:
        r = make_run(s, config={"k": 1})
        s.start_iteration(r, 0, "functional")
        s.finish_iteration(r, 0, "correct", code="c")
        s.append_event(r, "diff", {"d": "+x"})

    future = Migrations(MIGRATION_SET)
    future()(m001_initial)

    @future()
    def m002_future_column(db: Database) -> None:
        db["runs"].add_column("gpu_name", str)

    db = connect(path)
    assert migrate(db, future) == ["m002_future_column"]
    assert migrate(db, future) == []  # idempotent
    row = db.execute("SELECT gpu_name, config FROM runs WHERE id = ?", [r]).fetchone()
    assert row == (None, '{"k":1}')
    assert db.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", [r]).fetchone()[0] == 3
    db.close()

    with pytest.raises(SchemaTooNew, match="m002_future_column"):
        open_store(path)
