"""Runs: one synthesis of a problem for a target, and its lifecycle.

    create_run -> queued --start_run--> running --finish_run--> succeeded | failed | unsupported | cancelled
    queued | running --mark_interrupted_runs--> interrupted      (worker gone, or heartbeat stale)
    interrupted | failed | cancelled --resume_run--> running
    a manual run (kind "manual"): also succeeded --resume_run--> running, once per version a person evaluates

`update_run` is the unchecked escape hatch for plain fields (baselines, error, ...); the lifecycle calls above
are the ones that check transitions and append events.
"""

from __future__ import annotations

import datetime as _dt
import os
import secrets
import sqlite3
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any

from .db import from_json, iso, rows, to_json, utc_now, write_txn
from .errors import InvalidTransition, InvalidValue, RunNotFound
from .events import EventKind
from .iterations import IterationsMixin


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNSUPPORTED = "unsupported"  # the agent cannot write this problem (said on the first step); not resumable
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


RUN_STATUSES = frozenset(s.value for s in RunStatus)
LIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
FINAL_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.UNSUPPORTED, RunStatus.CANCELLED)
RESUMABLE_STATUSES = (RunStatus.INTERRUPTED, RunStatus.FAILED, RunStatus.CANCELLED)
# "synthesis": the agents write the programs; "manual": a person does, each evaluation a version (the Workbench)
RUN_KINDS = ("synthesis", "manual")

RUN_COLUMNS = (
    "id", "created_at", "updated_at", "problem_name", "problem_source", "target", "agent", "model",
    "analysis_model", "config", "status", "best_iteration", "best_speedup_vs_eager", "best_speedup_vs_compiled",
    "best_candidate_ms", "eager_ms", "compiled_ms", "worker_pid", "heartbeat_at", "finished_at", "error",
    "reference_program", "reference_target", "tokens_prompt", "tokens_completion", "cancel_requested", "kind",
    "author",
)
UPDATABLE_COLUMNS = frozenset(RUN_COLUMNS) - {"id", "created_at", "updated_at"}
# list_runs leaves out the two potentially large texts: the UI polls the list; get_run has everything.
LIST_COLUMNS = tuple(c for c in RUN_COLUMNS if c not in ("problem_source", "reference_program"))


def new_run_id() -> str:
    """12 hex characters: short enough to type in the CLI, 48 random bits (collisions are retried anyway)."""
    return secrets.token_hex(6)


def _decode(run: dict[str, Any]) -> dict[str, Any]:
    run["config"] = from_json(run["config"])
    return run


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (a zombie counts as dead)."""
    if os.name == "nt":  # os.kill(pid, 0) terminates the process on Windows: rely on heartbeats there
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    # A worker that exited but was not yet reaped by its parent (the app) still answers signal 0.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no procfs (macOS), or it exited just now
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


class RunsMixin(IterationsMixin):
    # --- create / read ----------------------------------------------------------------------------------------

    def create_run(self, problem_name: str, problem_source: str, target: str, *, agent: str = "llm",
                   model: str | None = None, analysis_model: str | None = None,
                   config: dict[str, Any] | None = None, reference_program: str | None = None,
                   reference_target: str | None = None, kind: str = "synthesis",
                   author: str | None = None) -> str:
        """Insert a `queued` run, append `run_created`; return the new run id. `kind` "manual": a person writes
        the programs (`author`), each evaluation of theirs one iteration."""
        if kind not in RUN_KINDS:
            raise InvalidValue(f"unknown run kind {kind!r}; known: {', '.join(RUN_KINDS)}")
        now = utc_now()
        row = dict(created_at=now, updated_at=now, problem_name=problem_name, problem_source=problem_source,
                   target=target, agent=agent, model=model, analysis_model=analysis_model, config=to_json(config),
                   status=RunStatus.QUEUED.value, reference_program=reference_program,
                   reference_target=reference_target, kind=kind, author=author)
        for _ in range(5):
            run_id = new_run_id()
            try:
                with write_txn(self.db):
                    self._insert_run({"id": run_id, **row})
                    self._insert_event(run_id, EventKind.RUN_CREATED, dict(
                        problem_name=problem_name, target=target, agent=agent, model=model,
                        analysis_model=analysis_model, config=config, kind=kind, author=author), None)
                return run_id
            except sqlite3.IntegrityError:
                if not self.db.execute("SELECT 1 FROM runs WHERE id = ?", [run_id]).fetchone():
                    raise  # not an id collision
        raise RuntimeError("could not allocate a unique run id")  # pragma: no cover - 48 random bits

    def _insert_run(self, row: dict[str, Any]) -> None:
        names = ", ".join(row)
        self.db.execute(f"INSERT INTO runs ({names}) VALUES ({', '.join('?' * len(row))})", list(row.values()))

    def get_run(self, run_id: str) -> dict[str, Any]:
        """Every column of the run, `config` decoded; raises RunNotFound."""
        return _decode(self._require_run(run_id, "*"))

    def list_runs(self, status: str | Iterable[str] | None = None, target: str | None = None,
                  search: str | None = None, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
        """Newest first; all columns but `problem_source` and `reference_program`.

        `status` is one status or several; `search` is a case-insensitive substring of the id, problem name,
        target, agent, model, kind or author."""
        where, params = self._run_filter(status, target, search)
        found = rows(self.db, f"SELECT {', '.join(LIST_COLUMNS)} FROM runs {where} "
                              "ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?", [*params, limit, offset])
        return [_decode(r) for r in found]

    def count_runs(self, status: str | Iterable[str] | None = None, target: str | None = None,
                   search: str | None = None) -> int:
        """How many runs `list_runs` would page through with the same filters."""
        where, params = self._run_filter(status, target, search)
        return self.db.execute(f"SELECT COUNT(*) FROM runs {where}", params).fetchone()[0]

    @staticmethod
    def _run_filter(status: str | Iterable[str] | None, target: str | None,
                    search: str | None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            clauses.append(f"status IN ({', '.join('?' * len(statuses))})" if statuses else "0")
            params += statuses
        if target is not None:
            clauses.append("target = ?")
            params.append(target)
        if search:
            pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            columns = ("id", "problem_name", "target", "agent", "model", "kind", "author")
            clauses.append("(" + " OR ".join(f"{c} LIKE ? ESCAPE '\\'" for c in columns) + ")")
            params += [pattern] * len(columns)
        return ("WHERE " + " AND ".join(clauses) if clauses else ""), params

    # --- plain updates ----------------------------------------------------------------------------------------

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set columns (`config` is JSON-encoded; `updated_at` is set for you). Does not check transitions."""
        unknown = set(fields) - UPDATABLE_COLUMNS
        if unknown:
            raise InvalidValue(f"not updatable run fields: {', '.join(sorted(unknown))}")
        if "status" in fields and fields["status"] not in RUN_STATUSES:
            raise InvalidValue(f"unknown run status {fields['status']!r}; known: {', '.join(sorted(RUN_STATUSES))}")
        if "config" in fields:
            fields["config"] = to_json(fields["config"])
        if "cancel_requested" in fields:
            fields["cancel_requested"] = int(bool(fields["cancel_requested"]))
        with write_txn(self.db):
            self._set(run_id, fields)

    def _set(self, run_id: str, fields: dict[str, Any]) -> None:
        fields = {**fields, "updated_at": utc_now()}
        assignments = ", ".join(f"{name} = ?" for name in fields)
        cursor = self.db.execute(f"UPDATE runs SET {assignments} WHERE id = ?", [*fields.values(), run_id])
        if cursor.rowcount == 0:
            raise RunNotFound(run_id)

    def heartbeat(self, run_id: str, pid: int | None = None) -> None:
        """Prove the worker is alive (call every few seconds); records its pid for the dead-worker check."""
        with write_txn(self.db):
            self._set(run_id, {"worker_pid": pid if pid is not None else os.getpid(), "heartbeat_at": utc_now()})

    def set_best(self, run_id: str, iteration: int, *, speedup_vs_eager: float | None,
                 speedup_vs_compiled: float | None = None, candidate_ms: float | None = None) -> int:
        """Record a new best iteration; appends `best_updated` and returns its seq."""
        with write_txn(self.db):
            self.get_iteration(run_id, iteration)  # raises RunNotFound / IterationNotFound
            self._set(run_id, dict(best_iteration=iteration, best_speedup_vs_eager=speedup_vs_eager,
                                   best_speedup_vs_compiled=speedup_vs_compiled, best_candidate_ms=candidate_ms))
            return self._insert_event(run_id, EventKind.BEST_UPDATED, dict(
                iteration=iteration, speedup_vs_eager=speedup_vs_eager, speedup_vs_compiled=speedup_vs_compiled,
                candidate_ms=candidate_ms), iteration)

    def add_usage(self, run_id: str, prompt_tokens: int, completion_tokens: int, iteration: int | None = None,
                  extra: dict[str, Any] | None = None) -> int:
        """Add one LLM call's token usage to the run totals; appends `usage` and returns its seq."""
        with write_txn(self.db):
            cursor = self.db.execute(
                "UPDATE runs SET tokens_prompt = tokens_prompt + ?, tokens_completion = tokens_completion + ?, "
                "updated_at = ? WHERE id = ? RETURNING tokens_prompt, tokens_completion",
                [prompt_tokens, completion_tokens, utc_now(), run_id])
            found = cursor.fetchall()  # drain RETURNING, or COMMIT finds the statement still in progress
            if not found:
                raise RunNotFound(run_id)
            totals = found[0]
            data = {**(extra or {}), "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                    "tokens_prompt": totals[0], "tokens_completion": totals[1]}
            return self._insert_event(run_id, EventKind.USAGE, data, iteration)

    # --- lifecycle --------------------------------------------------------------------------------------------

    def _status(self, run_id: str) -> str:
        return self._require_run(run_id, "status")["status"]

    def start_run(self, run_id: str, pid: int | None = None) -> None:
        """queued -> running, claimed by worker `pid` (default: this process)."""
        with write_txn(self.db):
            status = self._status(run_id)
            if status != RunStatus.QUEUED:
                raise InvalidTransition(run_id, status, "start")
            self._set(run_id, {"status": RunStatus.RUNNING.value, "worker_pid": pid or os.getpid(),
                               "heartbeat_at": utc_now()})

    def finish_run(self, run_id: str, status: str, error: str | None = None, stop_reason: str = "",
                   best_slower_than: list[str] | tuple[str, ...] = (), use: str | None = None) -> int:
        """End the run as succeeded / failed / unsupported / cancelled; appends `run_finished` (with the loop's
        `stop_reason`, why it stopped, in words; `best_slower_than`, the measured baselines its best program loses
        to, and `use`, what to use instead, when the loop says so) and returns its seq.

        Allowed from `interrupted` too: a worker wrongly presumed dead (e.g. a suspended laptop) keeps its result.
        """
        if status not in FINAL_STATUSES:
            raise InvalidValue(f"finish_run status must be one of {', '.join(FINAL_STATUSES)}, not {status!r}")
        with write_txn(self.db):
            current = self._status(run_id)
            if current not in (*LIVE_STATUSES, RunStatus.INTERRUPTED):
                raise InvalidTransition(run_id, current, "finish")
            self._set(run_id, {"status": str(status), "error": error, "finished_at": utc_now()})
            run = self.get_run(run_id)
            data = {"status": str(status), "error": error,
                    **{k: run[k] for k in ("best_iteration", "best_speedup_vs_eager", "best_speedup_vs_compiled")}}
            if stop_reason:
                data["stop_reason"] = stop_reason
            if use is not None:
                data.update(best_slower_than=list(best_slower_than), use=use)
            return self._insert_event(run_id, EventKind.RUN_FINISHED, data, None)

    def resume_run(self, run_id: str, pid: int | None = None) -> int | None:
        """interrupted / failed / cancelled -> running under worker `pid`; clears error, finish time and the
        cancel flag; appends `run_resumed`. Returns the last completed iteration index (None: start over)."""
        with write_txn(self.db):
            run = self._require_run(run_id, "status, kind")
            previous = run["status"]
            manual_again = run["kind"] == "manual" and previous == RunStatus.SUCCEEDED
            if previous not in RESUMABLE_STATUSES and not manual_again:
                raise InvalidTransition(run_id, previous, "resume")
            pid = pid or os.getpid()
            self._set(run_id, {"status": RunStatus.RUNNING.value, "worker_pid": pid, "heartbeat_at": utc_now(),
                               "finished_at": None, "error": None, "cancel_requested": 0})
            from_iteration = self.last_completed_iteration(run_id)
            self._insert_event(run_id, EventKind.RUN_RESUMED, dict(
                worker_pid=pid, previous_status=previous, from_iteration=from_iteration), None)
            return from_iteration

    def request_cancel(self, run_id: str) -> bool:
        """Ask the worker to stop (it polls `cancel_requested`). True when newly requested; False when already
        requested or the run is not queued/running (then nothing is written)."""
        with write_txn(self.db):
            run = self._require_run(run_id, "status, cancel_requested")
            if run["cancel_requested"] or run["status"] not in LIVE_STATUSES:
                return False
            self._set(run_id, {"cancel_requested": 1})
            self._insert_event(run_id, EventKind.CANCEL_REQUESTED, {}, None)
            return True

    def cancel_requested(self, run_id: str) -> bool:
        return bool(self._require_run(run_id, "cancel_requested")["cancel_requested"])

    def mark_interrupted_runs(self, stale_after_s: float = 60.0) -> list[str]:
        """Mark queued/running runs whose worker is gone as `interrupted` (+ `run_interrupted`); return their ids.

        Gone = the recorded worker pid is not alive on this host, or the last sign of life (heartbeat, else the
        last row update) is older than `stale_after_s`. The heartbeat test also catches a pid reused by an
        unrelated process. A queued run that no worker claimed within `stale_after_s` counts too: KForge starts
        one worker per run right away and has no long-lived queue. Call it from the app/CLI at startup and now
        and then; the pid test assumes workers run on this host.
        """
        cutoff = iso(_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(seconds=stale_after_s))
        marked: list[str] = []
        with write_txn(self.db):  # decide and update under one lock: a heartbeat cannot slip in between
            live = rows(self.db, "SELECT id, worker_pid, heartbeat_at, updated_at FROM runs WHERE status IN (?, ?)",
                        [s.value for s in LIVE_STATUSES])
            for run in live:
                reason = self._interruption(run, cutoff)
                if reason is None:
                    continue
                message = {"worker_dead": f"worker process {run['worker_pid']} is gone",
                           "heartbeat_stale": f"no heartbeat for over {stale_after_s:g} s"}[reason]
                self._set(run["id"], {"status": RunStatus.INTERRUPTED.value, "error": message})
                self._insert_event(run["id"], EventKind.RUN_INTERRUPTED, dict(
                    reason=reason, worker_pid=run["worker_pid"], heartbeat_at=run["heartbeat_at"]), None)
                marked.append(run["id"])
        return marked

    @staticmethod
    def _interruption(run: dict[str, Any], cutoff: str) -> str | None:
        if run["worker_pid"] is not None and not pid_alive(run["worker_pid"]):
            return "worker_dead"
        if (run["heartbeat_at"] or run["updated_at"]) < cutoff:  # fixed-width ISO strings compare as times
            return "heartbeat_stale"
        return None

    def delete_run(self, run_id: str) -> None:
        """Delete a run with its iterations and events (ON DELETE CASCADE); raises RunNotFound."""
        with write_txn(self.db):
            if self.db.execute("DELETE FROM runs WHERE id = ?", [run_id]).rowcount == 0:
                raise RunNotFound(run_id)
