"""Connection, pragmas, transactions and value encoding shared by the store modules.

One `sqlite_utils.Database` (one `sqlite3` connection) per thread or process: the connection is opened with
`check_same_thread=True`, so sharing it across threads fails loudly instead of corrupting transaction state.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from .errors import InvalidValue, RunNotFound

DEFAULT_DB_PATH = Path("~/.local/share/kforge/runs.db")
BUSY_TIMEOUT_MS = 5000


def resolve_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """Explicit path, else `$KFORGE_DB`, else `~/.local/share/kforge/runs.db`."""
    chosen = path if path is not None else (os.environ.get("KFORGE_DB") or DEFAULT_DB_PATH)
    return Path(chosen).expanduser()


def connect(path: Path) -> Database:
    """Open `path` (creating its parent folders) with the pragmas every store connection relies on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # timeout= installs SQLite's busy handler; the explicit pragma below states the same value where it is visible.
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=True)
    # Plugins could register functions or change the connection; the store needs neither and opening stays cheap.
    db = Database(conn, execute_plugins=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # Foreign keys are per connection and off by default in SQLite; without them ON DELETE CASCADE is ignored.
    conn.execute("PRAGMA foreign_keys=ON")
    _enable_wal(conn)
    # In WAL mode NORMAL never corrupts the file; it only risks the last commits on power loss, and saves an
    # fsync per event append.
    conn.execute("PRAGMA synchronous=NORMAL")
    return db


def _enable_wal(conn: sqlite3.Connection) -> None:
    # WAL is persistent in the file, so this is a read on every open but the first. Readers then never block the
    # writer and the writer never blocks readers (the UI polls while a worker appends).
    if conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        return
    # Switching needs an exclusive lock; when several processes open a fresh file at once one of them may be
    # refused without the busy handler being consulted, so retry briefly.
    for _ in range(100):
        try:
            if conn.execute("PRAGMA journal_mode=wal").fetchone()[0] == "wal":
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        time.sleep(0.05)
    raise sqlite3.OperationalError("could not switch the run store to WAL journal mode")


@contextlib.contextmanager
def write_txn(db: Database) -> Iterator[None]:
    """A write transaction that takes the write lock up front (BEGIN IMMEDIATE).

    A deferred BEGIN would read first and upgrade later; in WAL mode that upgrade fails with SQLITE_BUSY_SNAPSHOT,
    immediately and without waiting, whenever another process committed in between (e.g. two workers appending
    events). IMMEDIATE waits on the busy timeout instead, so read-then-write sequences such as seq assignment
    are atomic. A call made inside an open transaction joins it: the outermost caller commits or rolls back.
    """
    conn = db.conn
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def rows(db: Database, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """Run a SELECT and return plain dicts (no implicit transaction is opened for reads)."""
    cursor = db.execute(sql, list(params))
    keys = [d[0] for d in cursor.description]
    return [dict(zip(keys, r)) for r in cursor.fetchall()]


def utc_now() -> str:
    """ISO-8601 UTC with a fixed width (microseconds, +00:00): string order is time order, so SQL can compare."""
    return iso(_dt.datetime.now(_dt.timezone.utc))


def iso(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.timezone.utc).isoformat(timespec="microseconds")


# --- JSON columns ---------------------------------------------------------------------------------------------

_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def to_json(value: Any) -> str | None:
    """Encode a JSON column. `None` stays SQL NULL.

    Non-finite floats (a NaN max-difference in an `incorrect` verdict is ordinary data) become the strings "NaN",
    "Infinity", "-Infinity": bare NaN is not JSON, and SQLite's json functions and browsers reject it.
    """
    if value is None:
        return None
    try:
        try:
            return json.dumps(value, allow_nan=False, separators=(",", ":"))
        except ValueError as exc:
            if "Out of range float" not in str(exc):
                raise
            return json.dumps(_finite(value), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # an unknown type, a circular reference
        raise InvalidValue(f"value is not JSON-serialisable: {exc}") from None


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else _NON_FINITE[value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class StoreBase:
    """What the RunStore mixins share: the connection, and the existence check every run-scoped call makes."""

    db: Database

    def _require_run(self, run_id: str, columns: str = "id") -> dict[str, Any]:
        found = rows(self.db, f"SELECT {columns} FROM runs WHERE id = ?", [run_id])
        if not found:
            raise RunNotFound(run_id)
        return found[0]
