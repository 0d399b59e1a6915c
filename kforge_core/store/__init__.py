"""KForge run store: SQLite (WAL) through sqlite-utils; append-only migrations; a per-run event log.

    from kforge_core.store import open_store
    with open_store() as store:             # one store per thread / process
        run_id = store.create_run("matmul", source, "cpu", model="gpt-x")

The event-kind contract is documented in `kforge_core.store.events`; the run lifecycle in `kforge_core.store.runs`.
"""

from .db import DEFAULT_DB_PATH, resolve_db_path
from .errors import (InvalidTransition, InvalidValue, IterationNotFound, RunNotFound, SchemaTooNew,
                     StoreError)
from .events import EVENT_KINDS, STORE_OWNED_KINDS, TOKEN_FLUSH_S, TOKEN_MAX_CHARS, EventKind, TokenBuffer
from .iterations import ITERATION_STATUSES, PASSES, IterationStatus, Pass
from .runs import RUN_STATUSES, RunStatus, pid_alive
from .store import RunStore, open_store

__all__ = [
    "DEFAULT_DB_PATH", "EVENT_KINDS", "ITERATION_STATUSES", "PASSES", "RUN_STATUSES", "STORE_OWNED_KINDS",
    "EventKind", "InvalidTransition", "InvalidValue", "IterationNotFound", "IterationStatus", "Pass", "RunNotFound",
    "RunStatus", "RunStore", "SchemaTooNew", "StoreError", "TOKEN_FLUSH_S", "TOKEN_MAX_CHARS", "TokenBuffer",
    "open_store", "pid_alive", "resolve_db_path",
]
