"""Run events: the append-only log the UI polls and replays. THE EVENT CONTRACT (names are stored; never rename).

An event is `{"seq", "ts", "iteration", "kind", "data"}`: `seq` starts at 1 for each run and grows by exactly 1
(no gaps, no duplicates, even with several processes appending), `ts` is ISO-8601 UTC, `iteration` is the
iteration index it belongs to or None, `data` a decoded JSON object. Replaying a run = `get_run(run_id)` (its
static inputs: problem source, config) + `events(run_id)` in seq order; polling = `events(run_id, after_seq=last)`.

Appended by the store itself, in the same transaction as the row change they describe (`append_event` refuses
these kinds, so the log and the rows can never disagree):

    run_created         create_run             {problem_name, target, agent, model, analysis_model, config}
    iteration_finished  finish_iteration       {index, pass, status, reason, candidate_ms,
                                                speedup_vs_eager, speedup_vs_compiled}
    best_updated        set_best               {iteration, speedup_vs_eager, speedup_vs_compiled, candidate_ms}
    usage               add_usage              {prompt_tokens, completion_tokens,            (this call)
                                                tokens_prompt, tokens_completion, **extra}   (run totals)
    run_finished        finish_run             {status, error, best_iteration, best_speedup_vs_eager,
                                                best_speedup_vs_compiled}
    run_interrupted     mark_interrupted_runs  {reason: "worker_dead" | "heartbeat_stale", worker_pid, heartbeat_at}
    run_resumed         resume_run             {worker_pid, previous_status, from_iteration}
    cancel_requested    request_cancel         {}

Appended by the loop with `append_event` (the data shapes belong to kforge_core/loop.py):

    pass_started, prompt_sent, tokens, program_extracted, program_missing, diff, compile_log, verdict, timings,
    profile, recommendations, error, eval_stage, head_to_head

`tokens` carries streamed model output, batched by `TokenBuffer` (`{"text": ..., **extra}`) so that one event
is written per N characters or T seconds rather than per token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any

from .db import StoreBase, from_json, rows, to_json, utc_now, write_txn
from .errors import InvalidValue


class EventKind(StrEnum):
    RUN_CREATED = "run_created"
    PASS_STARTED = "pass_started"
    PROMPT_SENT = "prompt_sent"
    TOKENS = "tokens"
    PROGRAM_EXTRACTED = "program_extracted"
    PROGRAM_MISSING = "program_missing"
    DIFF = "diff"
    COMPILE_LOG = "compile_log"
    VERDICT = "verdict"
    TIMINGS = "timings"
    PROFILE = "profile"
    RECOMMENDATIONS = "recommendations"
    USAGE = "usage"
    ITERATION_FINISHED = "iteration_finished"
    BEST_UPDATED = "best_updated"
    RUN_FINISHED = "run_finished"
    RUN_INTERRUPTED = "run_interrupted"
    RUN_RESUMED = "run_resumed"
    ERROR = "error"
    CANCEL_REQUESTED = "cancel_requested"
    RETRY = "retry"
    EVAL_STAGE = "eval_stage"
    HEAD_TO_HEAD = "head_to_head"
    SLOWER_THAN_BASELINE = "slower_than_baseline"


EVENT_KINDS = frozenset(k.value for k in EventKind)

# streamed text becomes one `tokens` event per this many characters at the most, or once its oldest character has
# waited this long
TOKEN_MAX_CHARS = 1024
TOKEN_FLUSH_S = 0.25

# kind -> the RunStore method that appends it
STORE_OWNED_KINDS = {
    EventKind.RUN_CREATED: "create_run",
    EventKind.ITERATION_FINISHED: "finish_iteration",
    EventKind.BEST_UPDATED: "set_best",
    EventKind.USAGE: "add_usage",
    EventKind.RUN_FINISHED: "finish_run",
    EventKind.RUN_INTERRUPTED: "mark_interrupted_runs",
    EventKind.RUN_RESUMED: "resume_run",
    EventKind.CANCEL_REQUESTED: "request_cancel",
}


class EventsMixin(StoreBase):
    def append_event(self, run_id: str, kind: str, data: dict[str, Any] | None = None,
                     iteration: int | None = None) -> int:
        """Append one loop-owned event; return its seq."""
        if kind not in EVENT_KINDS:
            raise InvalidValue(f"unknown event kind {kind!r}; known: {', '.join(sorted(EVENT_KINDS))}")
        if kind in STORE_OWNED_KINDS:
            raise InvalidValue(f"event kind {kind!r} is appended by RunStore.{STORE_OWNED_KINDS[kind]}()")
        with write_txn(self.db):
            self._require_run(run_id)
            return self._insert_event(run_id, kind, data, iteration)

    def _insert_event(self, run_id: str, kind: str, data: dict[str, Any] | None, iteration: int | None) -> int:
        # Caller holds the write transaction (write_txn), so MAX(seq)+1 cannot race another writer.
        # (run_id, seq) is indexed, so MAX is a single index probe.
        encoded = to_json({} if data is None else data)
        (seq,) = self.db.execute(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE run_id = ?", [run_id]).fetchone()
        self.db.execute(
            "INSERT INTO events (run_id, seq, ts, iteration, kind, data) VALUES (?, ?, ?, ?, ?, ?)",
            [run_id, seq, utc_now(), iteration, str(kind), encoded])
        return seq

    def events(self, run_id: str, after_seq: int = 0, kinds: Iterable[str] | None = None,
               limit: int | None = None) -> list[dict[str, Any]]:
        """Events with seq > after_seq in seq order, optionally only some kinds; raises RunNotFound."""
        self._require_run(run_id)
        sql = "SELECT seq, ts, iteration, kind, data FROM events WHERE run_id = ? AND seq > ?"
        params: list[Any] = [run_id, after_seq]
        if kinds is not None:
            wanted = [str(k) for k in kinds]
            sql += f" AND kind IN ({', '.join('?' * len(wanted))})" if wanted else " AND 0"
            params += wanted
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        found = rows(self.db, sql, params)
        for event in found:
            event["data"] = from_json(event["data"])
        return found

    def last_seq(self, run_id: str) -> int:
        """The highest seq of the run (0 when it has no events)."""
        self._require_run(run_id)
        return self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?", [run_id]).fetchone()[0]

    def token_buffer(self, run_id: str, iteration: int | None = None, extra: dict[str, Any] | None = None,
                     max_chars: int = TOKEN_MAX_CHARS, max_interval_s: float = TOKEN_FLUSH_S,
                     clock: Callable[[], float] = time.monotonic) -> TokenBuffer:
        """A buffered appender of `tokens` events; use it as a context manager so the tail is flushed."""
        self._require_run(run_id)
        return TokenBuffer(self, run_id, iteration, extra, max_chars, max_interval_s, clock)


class TokenBuffer:
    """Batches streamed text into `tokens` events: a write flushes once the buffer holds `max_chars` characters
    or its oldest character has waited `max_interval_s` seconds.

    There is no background thread (a connection belongs to one thread), so the time limit is checked on each
    write; call `flush()` (or leave the `with` block) when the stream ends or stalls. Leaving the block on an
    exception still flushes: partial output is exactly what a user wants to see after a failure.
    """

    def __init__(self, store: EventsMixin, run_id: str, iteration: int | None, extra: dict[str, Any] | None,
                 max_chars: int, max_interval_s: float, clock: Callable[[], float]):
        if max_chars < 1 or max_interval_s < 0:
            raise InvalidValue("max_chars must be >= 1 and max_interval_s >= 0")
        self._store, self.run_id, self.iteration = store, run_id, iteration
        self._extra = dict(extra or {})
        if "text" in self._extra:
            raise InvalidValue("extra must not contain 'text' (it carries the tokens)")
        self.max_chars, self.max_interval_s, self._clock = max_chars, max_interval_s, clock
        self._parts: list[str] = []
        self._size = 0
        self._since: float | None = None  # clock() when the oldest unflushed text arrived

    @property
    def pending(self) -> str:
        return "".join(self._parts)

    def write(self, text: str) -> int | None:
        """Buffer `text`; return the seq of the event if this write flushed, else None."""
        if text:
            if self._since is None:
                self._since = self._clock()
            self._parts.append(text)
            self._size += len(text)
        if self._size and (self._size >= self.max_chars or self._clock() - self._since >= self.max_interval_s):
            return self.flush()
        return None

    def flush(self) -> int | None:
        """Write the buffered text as one event; return its seq, or None when nothing was buffered."""
        if not self._size:
            return None
        data = {**self._extra, "text": self.pending}
        seq = self._store.append_event(self.run_id, EventKind.TOKENS, data, self.iteration)
        # Cleared only once written: if the append fails (e.g. lock timeout) the text is kept for the next flush.
        self._parts, self._size, self._since = [], 0, None
        return seq

    def __enter__(self) -> TokenBuffer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.flush()
