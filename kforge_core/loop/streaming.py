"""Agent calls in threads, their streamed tokens yielded as `Tokens` events on the loop's own thread."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .events import LoopEvent, Tokens
from .types import Cancelled

# One agent call: takes the on_token callback, returns the agent's result (or raises).
AgentJob = Callable[[Callable[[str], None]], Any]


def stream_calls(jobs: dict[int, AgentJob], agent: str, cancel: threading.Event,
                 check_cancel: Callable[[], None]) -> Iterator[LoopEvent]:
    """Run agent calls in threads (all at once: a best-of-k step), yielding their tokens as they arrive.
    Returns {iteration: (result, None) | (None, exception)}.

    Threads, even for one call, because a generator cannot yield from inside the client's on_token callback.
    `check_cancel` raises `Cancelled` when the run is asked to stop; it is called at every token and every
    quarter second. On cancel the threads are abandoned: each stops at its next token (on_token raises once
    `cancel` is set), and a call stuck waiting for its first byte ends with the client's own timeout."""
    inbox: queue.Queue = queue.Queue()

    def run(i: int, job: AgentJob) -> None:
        def on_token(text: str) -> None:
            if cancel.is_set():
                raise Cancelled()
            inbox.put(("token", i, text))
        try:
            inbox.put(("done", i, (job(on_token), None)))
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
        else:
            results[i] = payload
    return results
