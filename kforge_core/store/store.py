"""`RunStore` and `open_store`: the run store's entry point."""

from __future__ import annotations

import os

from sqlite_utils import Database

from .db import connect, resolve_db_path
from .migrations import ensure_schema
from .runs import RunsMixin


class RunStore(RunsMixin):
    """The KForge run store over one SQLite connection.

    NOT thread-safe, by design: open one RunStore per thread and per process (`open_store` is cheap: a connect,
    a few pragmas, one read of the migrations table). The connection refuses use from another thread. Several
    stores, in any number of processes, may use the same file at once: writes serialise on SQLite's lock (waiting
    up to the busy timeout) and readers never block in WAL mode.
    """

    def __init__(self, db: Database, path: str):
        self.db = db
        self.path = path

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({self.path!r})"


def open_store(path: str | os.PathLike[str] | None = None) -> RunStore:
    """Open (creating and migrating as needed) the store at `path`, else `$KFORGE_DB`, else
    `~/.local/share/kforge/runs.db`."""
    resolved = resolve_db_path(path)
    db = connect(resolved)
    try:
        ensure_schema(db, str(resolved))
    except BaseException:
        db.close()
        raise
    return RunStore(db, str(resolved))
