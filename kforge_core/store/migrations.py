"""Schema migrations: append-only, numbered, applied through sqlite-utils' `Migrations` helper (sqlite-utils >= 4.0).

Rules: never edit or reorder a migration that has shipped; a schema change is a new `mNNN_...` function at the
end. Migrations run inside one write transaction, so they must stay transactional (no VACUUM).

The helper records applied names in `_sqlite_migrations` (set name "kforge"). Statuses and event kinds are
validated in Python rather than by CHECK constraints: adding a value must not need a table rebuild.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlite_utils import Database

try:
    from sqlite_utils import Migrations
except ImportError as exc:  # pragma: no cover - depends on the installed version
    raise ImportError("the KForge run store needs sqlite-utils >= 4.0 (sqlite_utils.Migrations)") from exc

from .db import write_txn
from .errors import SchemaTooNew

MIGRATION_SET = "kforge"
MIGRATIONS = Migrations(MIGRATION_SET)
KNOWN: list[str] = []  # names in order; sqlite-utils keeps its list private


def _migration(fn: Callable[[Database], None]) -> Callable[[Database], None]:
    KNOWN.append(fn.__name__)
    return MIGRATIONS()(fn)


def _script(db: Database, sql: str) -> None:
    for statement in filter(None, (s.strip() for s in sql.split(";"))):
        db.execute(statement)


# Raw DDL rather than table.create(): the schema is a stored contract, and ON DELETE CASCADE, NOT NULL defaults
# and index names must be exactly what is written here.
@_migration
def m001_initial(db: Database) -> None:
    _script(db, """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            problem_name TEXT NOT NULL,
            problem_source TEXT NOT NULL,
            target TEXT NOT NULL,
            agent TEXT NOT NULL,
            model TEXT,
            analysis_model TEXT,
            config TEXT,
            status TEXT NOT NULL,
            best_iteration INTEGER,
            best_speedup_vs_eager REAL,
            best_speedup_vs_compiled REAL,
            best_candidate_ms REAL,
            eager_ms REAL,
            compiled_ms REAL,
            worker_pid INTEGER,
            heartbeat_at TEXT,
            finished_at TEXT,
            error TEXT,
            reference_program TEXT,
            reference_target TEXT,
            tokens_prompt INTEGER NOT NULL DEFAULT 0,
            tokens_completion INTEGER NOT NULL DEFAULT 0,
            cancel_requested INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX idx_runs_created_at ON runs (created_at);
        CREATE INDEX idx_runs_status ON runs (status);

        CREATE TABLE iterations (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            "index" INTEGER NOT NULL,
            pass TEXT NOT NULL,
            status TEXT,
            reason TEXT,
            code TEXT,
            candidate_ms REAL,
            speedup_vs_eager REAL,
            speedup_vs_compiled REAL,
            verdict TEXT,
            profile TEXT,
            recommendations TEXT,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            PRIMARY KEY (run_id, "index")
        );

        CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            ts TEXT NOT NULL,
            iteration INTEGER,
            kind TEXT NOT NULL,
            data TEXT
        );
        CREATE UNIQUE INDEX idx_events_run_seq ON events (run_id, seq)
    """)


@_migration
def m002_run_kind_author(db: Database) -> None:
    """A run is a synthesis by the agents or a manual run (versions a person evaluated in the Workbench), with the
    person who wrote them."""
    _script(db, """
        ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'synthesis';
        ALTER TABLE runs ADD COLUMN author TEXT
    """)


# --- runner ---------------------------------------------------------------------------------------------------


def migrate(db: Database, migrations: Migrations = MIGRATIONS) -> list[str]:
    """Apply pending migrations; return the names applied (empty when the schema is current).

    Runs under BEGIN IMMEDIATE so that two processes opening a fresh file at once do not both create tables: the
    second waits for the lock, then finds nothing pending.
    """
    if not migrations.pending(db):
        return []
    with write_txn(db):
        names = [m.name for m in migrations.pending(db)]
        migrations.apply(db)
    return names


def ensure_schema(db: Database, path: str) -> list[str]:
    """Bring the store's schema up to date, refusing a file that a newer KForge has migrated."""
    unknown = [m.name for m in MIGRATIONS.applied(db) if m.name not in KNOWN]
    if unknown:
        raise SchemaTooNew(path, unknown)
    return migrate(db)
