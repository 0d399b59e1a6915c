"""Runs in the store: create one, execute it here (CLI) or in a detached worker (app), resume it, cancel it.

`execute_run` drives `Synthesis.events()` and writes every event to the store through `StoreRecorder` (store-owned
kinds through their RunStore methods, streamed tokens batched by the store's TokenBuffer, and written by a timer
thread when the model goes silent). A heartbeat thread with its own connection proves the process alive every few
seconds and polls the cancel flag (every CANCEL_POLL_S), so a cancel requested from the app or `runs cancel` reaches
the loop at its next check point: between steps, the next streamed token, or -- during an evaluation -- the
evaluator's supervision loop, which kills the evaluation's process group at once and ends the run as cancelled.

Whatever stops the run -- the loop's own end, a cancel, Ctrl-C, an endpoint refusal, a bug -- the record is left
consistent: every started iteration finished with a status, the run finished as succeeded / failed / unsupported /
cancelled.
Only a killed process (SIGKILL, power loss) leaves a run "running"; `RunStore.mark_interrupted_runs` (called at
CLI and worker start) turns it into "interrupted", and `resume_run` continues it from its last finished iteration.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import KForgeError
from .config import RunConfig
from .engine import Synthesis
from .events import LoopEvent
from .types import CANCELLED_ITERATION_STATUS, STOPPED
from ..platform import REPO_ROOT
from ..store import TOKEN_FLUSH_S, TOKEN_MAX_CHARS, RunStore, TokenBuffer, open_store, resolve_db_path

HEARTBEAT_S = 5.0  # well inside mark_interrupted_runs' default 60 s staleness
CANCEL_POLL_S = 0.5
ENV_API_KEY = "OPENAI_API_KEY"
ENV_RUN_BASE_URL = "KFORGE_RUN_BASE_URL"  # the unredacted base URL, for a worker (the store keeps it redacted)

EventSink = Callable[[LoopEvent], None]


def create_run(store: RunStore, config: RunConfig, *, check_target: bool = True) -> str:
    """Validate `config` and create a queued run holding it (minus secrets); return the run id.

    `check_target=False`: the run executes on another machine (a Ray worker node), which checks the target there;
    this machine may have no such device at all."""
    config.validate()
    from ..platform import get_platform
    from ..problem import load_problem

    if check_target:
        get_platform(config.target, require_available=True)  # a usage error now, not a failed run later
    load_problem(text=config.problem_source, name=config.problem_name)  # static checks, with line numbers
    return store.create_run(config.problem_name, config.problem_source, config.target, agent=config.agent,
                            model=config.model, analysis_model=config.analysis_model, config=config.to_record(),
                            reference_program=config.reference_program, reference_target=config.reference_target)


def execute_run(db_path: str | os.PathLike | None, run_id: str, config: RunConfig,
                on_event: EventSink | None = None, *, resume: bool = False) -> str:
    """Run the loop in this process, writing every event to the store; return the run's final status.

    `resume=True` continues an interrupted / failed / cancelled run from its last finished iteration."""
    from ..agents.factory import build_agents
    from .state import restore_state

    with open_store(db_path) as store:
        state = None
        if resume:
            store.resume_run(run_id)
            state = restore_state(store, run_id, config)
        else:
            store.start_run(run_id)

        def events(cancel: threading.Event):
            generation, analysis = build_agents(config)
            synthesis = Synthesis(config, generation, analysis, state=state, should_cancel=cancel.is_set)
            return synthesis.events()

        return record_events(store, run_id, events, on_event)


def record_events(store: RunStore, run_id: str, events: Callable[[threading.Event], Iterator[LoopEvent]],
                  on_event: EventSink | None = None) -> str:
    """Write the events of a started run to the store under a heartbeat (which sets the cancel event it hands
    `events` when a cancel is requested), closing the record whatever happens; return the run's final status."""
    cancel = threading.Event()
    recorder = StoreRecorder(store, run_id)
    with _Heartbeat(store.path, run_id, cancel):
        try:
            for event in events(cancel):
                recorder.record(event)
                if on_event is not None:
                    on_event(event)
        except KeyboardInterrupt:
            recorder.abort("cancelled", None, "interrupted (Ctrl-C or SIGTERM)")
        except KForgeError as e:  # before the loop started (agents, problem, target) or while writing
            recorder.abort("failed", str(e), str(e))
        except BaseException as e:
            recorder.abort("failed", f"internal error: {type(e).__name__}: {e}", "internal error")
            raise
        finally:
            recorder.close()
    return store.get_run(run_id)["status"]


def resume_run(db_path: str | os.PathLike | None, run_id: str, config: RunConfig | None = None,
               on_event: EventSink | None = None) -> str:
    """Continue a run whose process died (or that failed / was cancelled) in this process; return its final
    status. `config` None: the stored one, with the API key from the environment. For a detached resume use
    `launch_worker(db_path, run_id, config, resume=True)`."""
    with open_store(db_path) as store:
        store.mark_interrupted_runs()
        if config is None:
            config = config_for_worker(store.get_run(run_id))
        else:
            store.update_run(run_id, config=config.to_record())
    return execute_run(db_path, run_id, config, on_event, resume=True)


def cancel_run(db_path: str | os.PathLike | None, run_id: str) -> bool:
    """Ask a run to stop. A live run's worker stops at its next check point; a run whose worker is gone is marked
    cancelled at once. True when something changed."""
    with open_store(db_path) as store:
        store.mark_interrupted_runs()
        if store.request_cancel(run_id):
            return True
        if store.get_run(run_id)["status"] == "interrupted":
            store.finish_run(run_id, "cancelled", "cancelled while interrupted")
            return True
        return False


def launch_worker(db_path: str | os.PathLike | None, run_id: str, config: RunConfig, *, resume: bool = False,
                  log_path: str | os.PathLike | None = None, extra_args: tuple[str, ...] = ()) -> int:
    """Start `python -m kforge_core.loop.worker` detached from this process (own session: it survives the UI, the
    browser tab or the terminal going away) and return its pid. The API key travels in its environment only.
    Its output goes to `log_path` (default: `<db folder>/worker-logs/<run_id>.log`)."""
    path = resolve_db_path(db_path)
    with open_store(path) as store:
        store.update_run(run_id, config=config.to_record())  # the worker reads its config from the store
    env = dict(os.environ)
    if config.api_key:
        env[ENV_API_KEY] = config.api_key
    if config.base_url:
        env[ENV_RUN_BASE_URL] = config.base_url
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    log = Path(log_path) if log_path else path.parent / "worker-logs" / f"{run_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "kforge_core.loop.worker", "--db", str(path), "--run-id", run_id]
    if resume:
        command.append("--resume")
    command.extend(extra_args)
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, env=env, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    return proc.pid


def config_for_worker(run: dict[str, Any], env: dict[str, str] | None = None) -> RunConfig:
    """The stored config of `run` with the secrets a launcher put in the environment."""
    env = os.environ if env is None else env
    return RunConfig.from_run(run, api_key=env.get(ENV_API_KEY) or None, base_url=env.get(ENV_RUN_BASE_URL) or None)


# ---------------------------------------------------------------------------------------------- recording


class StoreRecorder:
    """Writes loop events to the store: one method per store-owned kind, `append_event` for the rest.

    Streamed text is batched per (iteration, agent). The loop's thread hands over an event only when one arrives,
    so text a model sent just before going silent would wait for the silence to end; a flusher thread (started at
    the first token, with its own store connection) writes text that has waited `token_flush_s`. A lock keeps the
    two threads off the buffers at the same time; once the run is finished or the recorder closed, the flusher
    writes nothing more. Call `close()` when done with the recorder.
    """

    def __init__(self, store: RunStore, run_id: str, *, token_flush_s: float = TOKEN_FLUSH_S):
        self.store, self.run_id = store, run_id
        self.open_iterations: set[int] = set()
        self.run_finished = False
        self.token_flush_s = token_flush_s
        self._tokens: dict[tuple[int | None, str], TokenBuffer] = {}
        self._tokens_lock = threading.Lock()  # the buffers, and the flusher's permission to write
        self._flusher_stop = threading.Event()  # set (under the lock) when the flusher may no longer write
        self._flusher: threading.Thread | None = None
        self._appender = _ThreadStores(store)
        self._writers: dict[str, Callable[[Any], None]] = {
            "iteration_started": self._iteration_started, "iteration_finished": self._iteration_finished,
            "best_updated": self._best_updated, "usage": self._usage, "run_finished": self._run_finished,
            "program_extracted": self._program_extracted, "tokens": self._token,
        }

    def record(self, event: LoopEvent) -> None:
        if event.kind != "tokens":
            self.flush_tokens()  # streamed text first, so the log keeps the order things happened in
        self._writers.get(event.kind, self._append)(event)

    def _append(self, event: LoopEvent) -> None:
        self.store.append_event(self.run_id, event.kind, event.data(), event.iteration_index)

    def _token(self, event) -> None:
        key = (event.iteration, event.agent, event.thinking)
        with self._tokens_lock:
            if key not in self._tokens:
                extra = {"agent": event.agent, **({"thinking": True} if event.thinking else {})}
                self._tokens[key] = TokenBuffer(self._appender, self.run_id, event.iteration, extra,
                                                TOKEN_MAX_CHARS, self.token_flush_s, time.monotonic)
                self._start_flusher()
            self._tokens[key].write(event.text)

    def flush_tokens(self) -> None:
        with self._tokens_lock:
            for buffer in self._tokens.values():
                buffer.flush()

    def close(self) -> None:
        """Write the buffered text (unless the run is finished) and stop the flusher."""
        try:
            if not self.run_finished:
                self.flush_tokens()
        finally:
            self._stop_flusher()

    def _start_flusher(self) -> None:  # caller holds _tokens_lock
        if self._flusher is None and not self._flusher_stop.is_set():
            self._flusher = threading.Thread(target=self._flush_waiting_tokens, daemon=True,
                                             name=f"kforge-tokens-{self.run_id}")
            self._flusher.start()

    def _stop_flusher(self) -> None:
        with self._tokens_lock:  # not while the flusher writes; once set, it writes nothing more
            self._flusher_stop.set()
        if self._flusher is not None:
            self._flusher.join(timeout=10)

    def _flush_waiting_tokens(self) -> None:
        """The flusher thread: every `token_flush_s`, write the text that has waited that long."""
        try:
            store = open_store(self.store.path)
        except (sqlite3.Error, KForgeError, OSError):
            return  # no flusher: the loop's thread still writes the text at its next event
        with store:
            self._appender.use(store)
            while not self._flusher_stop.wait(self.token_flush_s):
                with self._tokens_lock:
                    if self._flusher_stop.is_set():
                        return
                    for buffer in self._tokens.values():
                        try:
                            buffer.write("")  # no new text: flushes what has waited max_interval_s
                        except (sqlite3.Error, KForgeError):
                            pass  # a busy database: the text stays buffered for the next tick

    def _iteration_started(self, event) -> None:
        self.store.start_iteration(self.run_id, event.iteration, event.pass_name)
        self.open_iterations.add(event.iteration)

    def _program_extracted(self, event) -> None:
        self._append(event)
        self.store.update_iteration(self.run_id, event.iteration, code=event.code)

    def _iteration_finished(self, event) -> None:
        self.store.finish_iteration(
            self.run_id, event.iteration, event.status, reason=event.reason, code=event.code,
            candidate_ms=event.candidate_ms, speedup_vs_eager=event.speedup_vs_eager,
            speedup_vs_compiled=event.speedup_vs_compiled, verdict=event.verdict, profile=event.profile,
            recommendations=event.recommendations)
        self.open_iterations.discard(event.iteration)

    def _best_updated(self, event) -> None:
        self.store.set_best(self.run_id, event.iteration, speedup_vs_eager=event.speedup_vs_eager,
                            speedup_vs_compiled=event.speedup_vs_compiled, candidate_ms=event.candidate_ms)
        self.store.update_run(self.run_id, eager_ms=event.eager_ms, compiled_ms=event.compiled_ms)

    def _usage(self, event) -> None:
        extra = {"agent": event.agent, "model": event.model, "latency_s": event.latency_s,
                 "estimated": event.estimated, "failed": event.failed, "warning": event.warning, "cost": event.cost}
        self.store.add_usage(self.run_id, event.prompt_tokens, event.completion_tokens, event.iteration, extra)

    def _run_finished(self, event) -> None:
        self._stop_flusher()  # record() has written the text; nothing is written after the run's end
        self.store.finish_run(self.run_id, event.status, event.error, stop_reason=event.stop_reason,
                              best_slower_than=event.best_slower_than,
                              use=event.use if event.best_iteration is not None else None)
        self.run_finished = True

    def abort(self, status: str, error: str | None, why: str) -> None:
        """Close the record when the loop could not: finish open iterations, then the run (if still live)."""
        try:
            self.flush_tokens()
        except (KForgeError, sqlite3.Error):
            pass  # the text is lost, the record's consistency is what matters now
        self._stop_flusher()
        for index in sorted(self.open_iterations):
            self.store.finish_iteration(self.run_id, index, CANCELLED_ITERATION_STATUS,
                                        reason=f"{STOPPED} ({why})")
        self.open_iterations.clear()
        if not self.run_finished and self.store.get_run(self.run_id)["status"] in ("queued", "running",
                                                                                    "interrupted"):
            self.store.finish_run(self.run_id, status, error)
            self.run_finished = True


class _ThreadStores:
    """What the recorder's TokenBuffers append through: the store connection of the thread that flushes (the
    loop's, or the flusher's own, set with `use`), since a connection refuses use from another thread."""

    def __init__(self, default: RunStore):
        self._default = default
        self._local = threading.local()

    def use(self, store: RunStore) -> None:
        self._local.store = store

    def append_event(self, *args: Any, **kwargs: Any) -> int:
        return getattr(self._local, "store", self._default).append_event(*args, **kwargs)


class _Heartbeat:
    """A thread with its own store connection: heartbeat every HEARTBEAT_S, cancel flag every CANCEL_POLL_S."""

    def __init__(self, db_path: str, run_id: str, cancel: threading.Event):
        self.db_path, self.run_id, self.cancel = db_path, run_id, cancel
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kforge-heartbeat-{run_id}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with open_store(self.db_path) as store:
            last_beat = 0.0
            while not self._stop.is_set():
                try:
                    if store.cancel_requested(self.run_id):
                        self.cancel.set()
                    if time.monotonic() - last_beat >= HEARTBEAT_S:
                        store.heartbeat(self.run_id)
                        last_beat = time.monotonic()
                except (sqlite3.Error, KForgeError):
                    pass  # a busy database: try again at the next tick
                self._stop.wait(CANCEL_POLL_S)


def sigterm_as_interrupt() -> None:
    """Make SIGTERM end the run like Ctrl-C (cancelled, record closed) instead of killing it mid-write."""
    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, handler)
