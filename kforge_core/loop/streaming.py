"""Agent calls in threads, their streamed tokens yielded as `Tokens` events on the loop's own thread; and a
candidate's evaluation run ahead in a thread, its events replayed on the loop's thread when their turn comes."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .events import LoopEvent, Retrying, Tokens
from .types import Cancelled

# One agent call: takes the on_token callback, returns the agent's result (or raises).
AgentJob = Callable[[Callable[[str], None]], Any]


def stream_calls(jobs: dict[int, AgentJob], agent: str, cancel: threading.Event,
                 check_cancel: Callable[[], None]) -> Iterator[LoopEvent]:
    """Run agent calls in threads (all at once: a best-of-k step), yielding their tokens as they arrive.
    Returns {iteration: (result, None) | (None, exception)}.

    Threads, even for one call, because a generator cannot yield from inside the client's on_token callback. The
    sink each call gets also takes thinking text and retry notices (`_Sink`), which become events the same way.
    `check_cancel` raises `Cancelled` when the run is asked to stop; it is called at every token and every
    quarter second. On cancel the threads are abandoned: each stops at its next token (on_token raises once
    `cancel` is set), and a call stuck waiting for its first byte ends with the client's own timeout."""
    inbox: queue.Queue = queue.Queue()

    def run(i: int, job: AgentJob) -> None:
        try:
            inbox.put(("done", i, (job(_Sink(i, inbox, cancel)), None)))
        except BaseException as e:  # noqa: BLE001 - handed to the loop's thread, which decides
            inbox.put(("done", i, (None, e)))

    for i, job in jobs.items():
        threading.Thread(target=run, args=(i, job), name=f"kforge-{agent}-{i}", daemon=True).start()
    results: dict[int, tuple] = {}
    while len(results) < len(jobs):
        try:
            what, i, payload = inbox.get(timeout=0.25)
        except queue.Empty:
            check_cancel()
            continue
        check_cancel()
        if what == "token":
            yield Tokens(iteration=i, agent=agent, text=payload)
        elif what == "thinking":
            yield Tokens(iteration=i, agent=agent, text=payload, thinking=True)
        elif what == "retry":
            yield Retrying(iteration=i, agent=agent, attempt=payload.attempt, delay_s=payload.delay_s,
                           error=str(payload.error))
        else:
            results[i] = payload
    return results


class _Sink:
    """What an agent call streams into (the `TokenSink` of agents.base): answer text, thinking, retries."""

    def __init__(self, iteration: int, inbox: queue.Queue, cancel: threading.Event):
        self._i, self._inbox, self._cancel = iteration, inbox, cancel

    def _put(self, what: str, payload: Any) -> None:
        if self._cancel.is_set():
            raise Cancelled()
        self._inbox.put((what, self._i, payload))

    def __call__(self, text: str) -> None:
        self._put("token", text)

    def thinking(self, text: str) -> None:
        self._put("thinking", text)

    def retrying(self, event: Any) -> None:  # an llm.RetryEvent
        self._put("retry", event)


class EvaluationAhead:
    """A candidate's evaluation (a generator of events that returns a value) started now in a thread of its own,
    so that a best-of-k step's evaluations run at once when each has its own device (best-of-k on Ray). Its events
    wait here until `replay` yields them on the loop's thread, in the step's order. It must change no loop state:
    the step records the verdicts one by one, as it would have without running them ahead."""

    def __init__(self, events: Iterator[LoopEvent], iteration: int):
        self._inbox: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(events,), name=f"kforge-eval-ahead-{iteration}",
                                        daemon=True)
        self._thread.start()

    def _run(self, events: Iterator[LoopEvent]) -> None:
        try:
            while True:
                self._inbox.put(("event", next(events)))
        except StopIteration as stop:
            self._inbox.put(("done", stop.value))
        except BaseException as e:  # noqa: BLE001 - re-raised on the loop's thread by replay
            self._inbox.put(("error", e))

    def replay(self, check_cancel: Callable[[], None]) -> Iterator[LoopEvent]:
        """Yield its events as they come and return its value (or raise its error); `check_cancel` every quarter
        second of waiting."""
        while True:
            try:
                what, payload = self._inbox.get(timeout=0.25)
            except queue.Empty:
                check_cancel()
                continue
            if what == "event":
                yield payload
            elif what == "done":
                return payload
            else:
                raise payload

    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout_s: float = 30.0) -> None:
        """Wait for the thread after a cancel (its evaluation polls the run's cancel flag and stops)."""
        self._thread.join(timeout_s)
