"""The Ray side of a bench: one task per problem on a worker node, and the mailbox that carries its events back.

A task runs the synthesis loop where Ray placed it and never touches the run store: it sends every loop event to
the `Mailbox` actor (on the driver's node), and the driver writes them (ray_driver.py). Each execution of a task
is an *attempt* with its own id, so when Ray runs a task again after its node died, the driver can tell the two
apart and never mixes their events into one run.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import ray

from ..errors import KForgeError
from .ray_candidates import ClusterEvaluator, NamedDevice, where_am_i

SEND_EVERY_S = 0.25  # streamed tokens are batched this long; every other event goes at once
MAX_BATCH = 500


@ray.remote(num_cpus=0, max_restarts=0)
class Mailbox:
    """Events from every task, in the order each task sent them, until the driver drains them. The driver alone
    reads it; tasks only append."""

    def __init__(self) -> None:
        self._items: list[tuple[str, str, Any]] = []

    def put(self, key: str, attempt: str, items: list) -> None:
        self._items.extend((key, attempt, item) for item in items)

    def drain(self) -> list[tuple[str, str, Any]]:
        items, self._items = self._items, []
        return items


class Outbox:
    """A task's side of the mailbox: non-token events go at once, tokens every SEND_EVERY_S. Calls from one task
    run on the actor in the order they were sent; `close` waits until the last one has run, so once the task's
    result is ready, all its events are in the mailbox."""

    def __init__(self, mailbox, key: str, attempt: str):
        self.mailbox, self.key, self.attempt = mailbox, key, attempt
        self._batch: list = []
        self._sent_at = time.monotonic()
        self._last = None

    def add(self, item: Any, now: bool = False) -> None:
        self._batch.append(item)
        urgent = now or getattr(item, "kind", None) != "tokens" or len(self._batch) >= MAX_BATCH
        if urgent or time.monotonic() - self._sent_at >= SEND_EVERY_S:
            self._send()

    def _send(self) -> None:
        if self._batch:
            self._last = self.mailbox.put.remote(self.key, self.attempt, self._batch)
            self._batch = []
        self._sent_at = time.monotonic()

    def close(self) -> None:
        self._send()
        if self._last is not None:
            ray.get(self._last)


def solve_on_node(key: str, config, mailbox, candidates: dict | None = None, cap_s: float | None = None) -> dict:
    """Run one problem's synthesis here, sending its events to `mailbox`; return where it ran.

    `cap_s`: the problem's time limit, counted from when this attempt starts. The loop stops itself there through
    its own cancel check (an evaluation's process group is killed as for a cancel), the run ends cancelled and the
    result says `stopped_after_s`, so the driver records the problem as stopped at the time limit.

    `candidates`: best-of-k on the cluster -- this task holds no device and evaluates each candidate as a Ray
    task asking for these resources and retried this often ({"resources", "max_retries"}; ray_candidates.py).
    Messages besides loop events: {"kf": "start", node, device} first (the driver then creates the run), and
    {"kf": "abort", status, error} when the loop could not run or stopped on an error."""
    from ..agents.factory import build_agents
    from ..loop.engine import Synthesis

    attempt = uuid.uuid4().hex
    here = where_am_i()
    try:
        platform, loop_options = _where_candidates_run(config.target, here, candidates)
    except KForgeError as e:  # no device for the target: the driver records it, nothing was started
        return {"attempt": attempt, **here, "device": None, "error": str(e)}
    outbox = Outbox(mailbox, key, attempt)
    outbox.add({"kf": "start", **here, "pid": os.getpid()}, now=True)
    started = time.monotonic()
    cap = _Cap(cap_s)
    try:
        generation, analysis = build_agents(config)
        for event in Synthesis(config, generation, analysis, platform=platform, should_cancel=cap,
                               **loop_options).events():
            outbox.add(event)
    except KForgeError as e:  # before the loop started (agents, problem) or while running it
        outbox.add({"kf": "abort", "status": "failed", "error": str(e)})
    except Exception as e:  # a bug: close the run with it rather than lose the problem's record
        outbox.add({"kf": "abort", "status": "failed", "error": f"internal error: {type(e).__name__}: {e}"})
    outbox.close()
    return {"attempt": attempt, **here,
            **({"stopped_after_s": time.monotonic() - started} if cap.fired else {})}


class _Cap:
    """The loop's `should_cancel` for a time limit: True (and remembered) once `seconds` have passed."""

    def __init__(self, seconds: float | None):
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.fired = False

    def __call__(self) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.fired = True
        return self.fired


def _where_candidates_run(target: str, here: dict, candidates: dict | None):
    """(the platform the loop uses, its evaluation options); sets here["device"]. Raises KForgeError, naming the
    node, when the target's device is not there (this node's, or a probed node's for best-of-k)."""
    from ..platform import get_platform

    if candidates is None:
        try:
            platform = get_platform(target, require_available=True)
        except KForgeError as e:
            raise KForgeError(f"on node {here['node']}: {e}") from None
        here["device"] = platform.device_name()
        return platform, {}

    evaluator = ClusterEvaluator(candidates["resources"], candidates["max_retries"])
    probe = evaluator.probe(target)
    if probe.get("error"):
        raise KForgeError(probe["error"])
    here["device"] = probe["device"]
    return NamedDevice(get_platform(target), probe["device"]), {
        "evaluate_fn": evaluator.evaluate, "head_to_head_fn": evaluator.head_to_head, "parallel_evaluations": True}
