"""Typed errors of the run store. All derive from `StoreError` (a `KForgeError`), so the CLI and the app can turn
any of them into one clean line."""

from __future__ import annotations

from kforge_core.errors import KForgeError


class StoreError(KForgeError):
    """Base class of every run-store error."""


class RunNotFound(StoreError, LookupError):
    def __init__(self, run_id: str):
        self.run_id = run_id
        super().__init__(f"no run with id {run_id!r}")


class IterationNotFound(StoreError, LookupError):
    def __init__(self, run_id: str, index: int):
        self.run_id, self.index = run_id, index
        super().__init__(f"run {run_id!r} has no iteration {index}")


class InvalidValue(StoreError, ValueError):
    """A value the store refuses: an unknown event kind or status, a field that is not a column, unencodable JSON."""


class InvalidTransition(StoreError):
    """A lifecycle call that does not fit the run's current status (e.g. resuming a run that is still running)."""

    def __init__(self, run_id: str, status: str, action: str):
        self.run_id, self.status, self.action = run_id, status, action
        super().__init__(f"cannot {action} run {run_id!r}: its status is {status!r}")


class SchemaTooNew(StoreError):
    """The database carries migrations this version of KForge does not know: a newer KForge wrote it.

    Writing to it with older code could violate constraints the newer schema relies on, so the store refuses."""

    def __init__(self, path: str, unknown: list[str]):
        self.unknown = unknown
        super().__init__(
            f"{path} was migrated by a newer KForge (unknown migrations: {', '.join(unknown)}); "
            "upgrade KForge or point KFORGE_DB at another file"
        )
