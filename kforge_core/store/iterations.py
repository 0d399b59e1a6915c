"""Iterations: one candidate program of a run and the evaluator's verdict on it.

`index` is assigned by the loop (unique per run, increasing across both passes). A row exists from
`start_iteration` on; `finished_at` (set by `finish_iteration`) marks it complete, which is what resuming
relies on (`last_completed_iteration`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from .db import from_json, rows, to_json, utc_now, write_txn
from .errors import InvalidValue, IterationNotFound
from .events import EventKind, EventsMixin


class Pass(StrEnum):
    FUNCTIONAL = "functional"
    OPTIMIZATION = "optimization"
    START = "start"  # a synthesis run's starting program, written by a person (the Workbench) and judged first
    MANUAL = "manual"  # a version written by a person in a manual run (the Workbench)


class IterationStatus(StrEnum):
    """The evaluator's verdicts, plus `no_program` when the model's reply held no extractable program."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    REJECTED = "rejected"
    NO_PROGRAM = "no_program"
    CANCELLED = "cancelled"  # the run was cancelled before this iteration reached a verdict


PASSES = frozenset(p.value for p in Pass)
ITERATION_STATUSES = frozenset(s.value for s in IterationStatus)
ITERATION_FIELDS = ("status", "reason", "code", "candidate_ms", "speedup_vs_eager", "speedup_vs_compiled",
                    "verdict", "profile", "recommendations")
_JSON_FIELDS = ("verdict", "profile", "recommendations")
_SUMMARY = ("status", "reason", "candidate_ms", "speedup_vs_eager", "speedup_vs_compiled")


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    for name in _JSON_FIELDS:
        row[name] = from_json(row[name])
    return row


class IterationsMixin(EventsMixin):
    def start_iteration(self, run_id: str, index: int, pass_: str) -> None:
        """Create iteration `index`. Restarting an unfinished one (a resumed run) resets it; a finished one is
        immutable and raises InvalidValue."""
        if pass_ not in PASSES:
            raise InvalidValue(f"unknown pass {pass_!r}; known: {', '.join(sorted(PASSES))}")
        reset = ", ".join(f"{name} = NULL" for name in ITERATION_FIELDS)
        with write_txn(self.db):
            self._require_run(run_id)
            cursor = self.db.execute(
                'INSERT INTO iterations (run_id, "index", pass, started_at) VALUES (?, ?, ?, ?) '
                'ON CONFLICT (run_id, "index") DO UPDATE SET pass = excluded.pass, '
                f"started_at = excluded.started_at, {reset} WHERE finished_at IS NULL",
                [run_id, index, str(pass_), utc_now()])
            if cursor.rowcount == 0:
                raise InvalidValue(f"iteration {index} of run {run_id!r} is already finished")

    def update_iteration(self, run_id: str, index: int, **fields: Any) -> None:
        """Set result fields of an iteration (e.g. `code` once extracted, `profile` after the verdict)."""
        with write_txn(self.db):
            self._set_fields(run_id, index, fields)

    def finish_iteration(self, run_id: str, index: int, status: str, *, reason: str | None = None,
                         code: str | None = None, candidate_ms: float | None = None,
                         speedup_vs_eager: float | None = None, speedup_vs_compiled: float | None = None,
                         verdict: dict | None = None, profile: dict | None = None,
                         recommendations: Any = None) -> int:
        """Record the outcome and mark the iteration complete; appends `iteration_finished` and returns its seq.

        Arguments left as None keep what `update_iteration` stored earlier."""
        given = dict(reason=reason, code=code, candidate_ms=candidate_ms, speedup_vs_eager=speedup_vs_eager,
                     speedup_vs_compiled=speedup_vs_compiled, verdict=verdict, profile=profile,
                     recommendations=recommendations)
        fields = {"status": status, **{k: v for k, v in given.items() if v is not None}}
        with write_txn(self.db):
            if self.get_iteration(run_id, index)["finished_at"] is not None:
                raise InvalidValue(f"iteration {index} of run {run_id!r} is already finished")
            self._set_fields(run_id, index, {**fields, "finished_at": utc_now()})
            row = self.get_iteration(run_id, index)
            data = {"index": index, "pass": row["pass"], **{k: row[k] for k in _SUMMARY}}
            return self._insert_event(run_id, EventKind.ITERATION_FINISHED, data, index)

    def _set_fields(self, run_id: str, index: int, fields: dict[str, Any]) -> None:
        unknown = set(fields) - set(ITERATION_FIELDS) - {"finished_at"}
        if unknown:
            raise InvalidValue(f"not iteration fields: {', '.join(sorted(unknown))}")
        if fields.get("status") is not None and fields["status"] not in ITERATION_STATUSES:
            raise InvalidValue(f"unknown iteration status {fields['status']!r}; "
                               f"known: {', '.join(sorted(ITERATION_STATUSES))}")
        if not fields:
            return
        values = [to_json(v) if k in _JSON_FIELDS else v for k, v in fields.items()]
        assignments = ", ".join(f"{name} = ?" for name in fields)
        cursor = self.db.execute(f'UPDATE iterations SET {assignments} WHERE run_id = ? AND "index" = ?',
                                 [*values, run_id, index])
        if cursor.rowcount == 0:
            self._require_run(run_id)
            raise IterationNotFound(run_id, index)

    def get_iteration(self, run_id: str, index: int) -> dict[str, Any]:
        found = rows(self.db, 'SELECT * FROM iterations WHERE run_id = ? AND "index" = ?', [run_id, index])
        if not found:
            self._require_run(run_id)
            raise IterationNotFound(run_id, index)
        return _decode(found[0])

    def iterations(self, run_id: str) -> list[dict[str, Any]]:
        """All iterations of a run by index, JSON fields decoded; raises RunNotFound."""
        self._require_run(run_id)
        return [_decode(r) for r in rows(self.db, 'SELECT * FROM iterations WHERE run_id = ? ORDER BY "index"',
                                         [run_id])]

    def last_completed_iteration(self, run_id: str) -> int | None:
        """Index of the highest finished iteration (where a resumed run picks up), or None."""
        self._require_run(run_id)
        return self.db.execute('SELECT MAX("index") FROM iterations WHERE run_id = ? AND finished_at IS NOT NULL',
                               [run_id]).fetchone()[0]
