"""The Ray executor: each problem of a bench is a Ray task placed on a node with a free device of the target's
kind (cluster.task_resources); this process, the driver, alone writes the run store. With best-of-k (k > 1) the
problem's task holds no device and each candidate's evaluation is a task of its own (ray_candidates.py).

Tasks send their loop events to a mailbox actor on the driver's node (ray_task.py); the driver drains it every
POLL_S and writes the events through the same StoreRecorder a local run uses, so the live run view and the bench
report read exactly what they read on one machine. The driver also does what a local worker's heartbeat thread
does: proves each live run alive (so `mark_interrupted_runs` leaves it be) and turns a cancel request into
`ray.cancel`.

A node that dies mid-task: Ray runs the task again elsewhere (max_retries). The new attempt announces itself with
a new attempt id; the driver closes the lost attempt's run as failed ("node lost, retried as run R") and records
the new attempt in a new run, so no run holds two attempts' iterations and the problem is recorded once.
Ctrl-C: outstanding tasks are cancelled, every started run is closed as cancelled, and the problem stays
unrecorded, so the same command resumes it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import KForgeError, UsageError
from .cluster import INSTALL_HINT, resource_names, task_resources
from .suite import SuiteProblem

POLL_S = 0.2
HEARTBEAT_S = 5.0
CANCEL_POLL_S = 0.5
MAX_RETRIES = 2  # runs of a task after its node or worker process died
# Best-of-k: a problem's task only runs the loop (generation, the agents) and waits for its candidates' tasks. It
# holds no resource at all: Ray lends a task's CPU to others only while its *main* thread waits in ray.get, and the
# loop waits for its candidates in threads, so problems holding CPUs could starve their own candidates (on a CPU
# cluster, every core). The driver keeps as many problems out at once as the cluster has devices instead.
COORDINATOR_RESOURCES = {"num_cpus": 0}
# The code the workers run is the driver's own (shipped as the job's working directory), so every node runs the
# same KForge: the package, the platforms' helpers candidates import, and the assets (gallery, prompts). Nothing else
# of the checkout goes (its .git alone was 14 MB, wheel folders beside it 80 MB more, zipped and sent every bench).
SHIPPED = ("kforge_core", "platforms", "assets")
SHIP_EXCLUDES = ["**/__pycache__", "*.pyc"]


def ship_excludes(root) -> list[str]:
    """Ray's excludes (gitignore patterns, anchored at the working directory) that leave only SHIPPED."""
    return SHIP_EXCLUDES + sorted(f"/{p.name}" for p in Path(root).iterdir() if p.name not in SHIPPED)


def import_ray():
    try:
        import ray
    except ImportError:
        raise UsageError(f"--cluster needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


def connect(address: str, *, ship_code: bool = True) -> None:
    """Join the Ray cluster at `address` (never start one: a typo must not bench on a private local cluster)."""
    ray = import_ray()
    from ..platform import REPO_ROOT

    runtime_env = {"working_dir": str(REPO_ROOT), "excludes": ship_excludes(REPO_ROOT)} if ship_code else None
    try:
        ray.init(address=address, namespace="kforge", runtime_env=runtime_env, log_to_driver=False,
                 logging_level="WARNING", configure_logging=True)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UsageError(f"cannot join the Ray cluster at {address!r}: {e}") from None


@dataclass
class _Attempt:
    """One execution of a problem's task that has announced itself, and the run its events go to."""

    attempt: str
    run_id: str
    recorder: object
    node: str
    device: str | None
    beat_at: float = 0.0


@dataclass
class _Problem:
    problem: SuiteProblem
    config: object  # RunConfig
    start: float  # submitted; then when its first attempt started (wall_s counts from there, like a local run)
    ref: object = None
    live: _Attempt | None = None
    attempts: int = 0
    queued_s: float | None = None  # waiting for a free device of the cluster
    lost: list[str] = field(default_factory=list)  # run ids of attempts whose node died


class RayExecutor:
    name = "ray"

    def __init__(self, address: str, *, cpus_per_task: float = 1.0, max_retries: int = MAX_RETRIES,
                 ship_code: bool = True, on_start=None):
        import_ray()  # a clear error before any work, not after the suite was resolved
        self.address, self.cpus_per_task, self.max_retries = address, cpus_per_task, max_retries
        self.ship_code = ship_code
        self.on_start = on_start  # tests: called as on_start(problem_name, node_id) when an attempt starts

    def describe(self) -> dict:
        return {"executor": "ray", "cluster": self.address}

    def run(self, problems: list[SuiteProblem], cfg, on_record, should_start=None) -> None:
        if should_start is not None:  # every task is submitted at once; Ray would need to cancel queued ones
            raise UsageError("--time-limit is for this machine's executor; a bench on a Ray cluster runs to the end "
                             "(Ctrl-C stops it, and the same command resumes); --problem-time-limit caps each "
                             "problem there")
        if not problems:
            return
        ray = import_ray()
        from ..platform import get_platform

        options = task_resources(get_platform(cfg.target).device_type, self.cpus_per_task)
        connect(self.address, ship_code=self.ship_code)
        try:
            slots = _check_resources(ray, options, cfg.target)
            if cfg.best_of_k > 1:  # the problem's task coordinates; each candidate's evaluation takes a device
                candidates = {"resources": options, "max_retries": self.max_retries}
                self._run(ray, problems, cfg, on_record, COORDINATOR_RESOURCES, candidates, window=slots)
            else:
                self._run(ray, problems, cfg, on_record, options)
        finally:
            ray.shutdown()

    # ------------------------------------------------------------------------------------------ the loop
    def _run(self, ray, problems, cfg, on_record, options, candidates: dict | None = None,
             window: int | None = None) -> None:
        """`window`: at most this many problems' tasks out at once (None: all; Ray queues them for devices)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from ..store import open_store
        from .problem_run import checked_run_config, error_record
        from .ray_task import Mailbox, solve_on_node

        here = ray.get_runtime_context().get_node_id()
        mailbox = Mailbox.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
        task = ray.remote(solve_on_node).options(max_retries=self.max_retries, retry_exceptions=False, **options)
        pending: dict[object, _Problem] = {}
        by_key: dict[str, _Problem] = {}
        waiting: list[_Problem] = []

        def submit() -> None:
            while waiting and (window is None or len(pending) < window):
                item = waiting.pop(0)
                item.start = time.monotonic()
                item.ref = task.remote(item.problem.name, item.config, mailbox, candidates, cfg.problem_time_limit_s)
                pending[item.ref] = item

        with open_store(cfg.db_path) as store:
            store.mark_interrupted_runs()
            for p in problems:
                start = time.monotonic()
                try:
                    config = checked_run_config(p, cfg)
                except KForgeError as e:  # unusable problem file: recorded here, never sent
                    on_record(error_record(p, str(e), start))
                    continue
                waiting.append(_Problem(p, config, start))
                by_key[p.name] = waiting[-1]
            submit()
            try:
                last_cancel_poll = 0.0
                while pending:
                    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=POLL_S)
                    self._deliver(store, by_key, ray.get(mailbox.drain.remote()))
                    for ref in ready:  # the task's last events were in the mailbox before its result was ready
                        item = pending.pop(ref)
                        on_record(self._finish(ray, store, item, ref))
                    submit()
                    self._beat(store, by_key)
                    if time.monotonic() - last_cancel_poll >= CANCEL_POLL_S:
                        last_cancel_poll = time.monotonic()
                        self._poll_cancel(ray, store, pending)
            except KeyboardInterrupt:
                self._interrupt(ray, store, mailbox, pending, by_key)
                raise
            finally:
                ray.kill(mailbox)

    def _deliver(self, store, by_key: dict[str, _Problem], items: list) -> None:
        for key, attempt, item in items:
            p = by_key.get(key)
            if p is None:
                continue
            if isinstance(item, dict) and item.get("kf") == "start":
                self._started(store, p, attempt, item)
            elif p.live is None or p.live.attempt != attempt:
                continue  # a lost attempt's late events: its run is closed, nothing more goes into it
            elif isinstance(item, dict) and item.get("kf") == "abort":
                p.live.recorder.abort(item["status"], item["error"], item["error"])
            else:
                p.live.recorder.record(item)

    def _started(self, store, p: _Problem, attempt: str, info: dict) -> None:
        from ..loop.runs import StoreRecorder, create_run

        run_id = create_run(store, p.config, check_target=False)
        if p.live is not None:  # Ray runs the task again: the previous attempt's node or worker died
            lost = p.live
            why = f"worker on {lost.node} lost mid-run; the problem was run again as {run_id}"
            lost.recorder.abort("failed", why, "worker node lost")
            lost.recorder.close()
            p.lost.append(lost.run_id)
        store.start_run(run_id, pid=os.getpid())  # this process keeps it alive (heartbeats) for the worker
        p.live = _Attempt(attempt, run_id, StoreRecorder(store, run_id), info["node"], info.get("device"),
                          time.monotonic())
        p.attempts += 1
        if p.queued_s is None:
            p.queued_s = time.monotonic() - p.start
            p.start = time.monotonic()
        if self.on_start is not None:
            self.on_start(p.problem.name, info["node_id"])

    def _finish(self, ray, store, p: _Problem, ref) -> dict:
        from .problem_run import error_record, run_record, stopped_record

        try:
            result = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            self._close(p, "cancelled", "cancelled")
            raise KeyboardInterrupt from None  # a cancelled run is not a result: the bench stops, resumable
        except ray.exceptions.RayError as e:  # retries used up (nodes kept dying), or Ray itself failed
            error = f"the task failed on the cluster after {p.attempts} attempt(s): {type(e).__name__}: {e}"
            self._close(p, "failed", error)
            if p.live is None:
                return error_record(p.problem, error[:2000], p.start, attempts=p.attempts)
            result = {"attempt": p.live.attempt}
        where = {"node": p.live.node if p.live else result.get("node"),
                 "device": p.live.device if p.live else result.get("device"), "attempts": p.attempts,
                 "queued_s": p.queued_s,
                 **({"lost_runs": p.lost} if p.lost else {})}
        if p.live is None or p.live.attempt != result["attempt"]:  # never started a run (e.g. no such target)
            return error_record(p.problem, result.get("error") or "the task sent no events", p.start, **where)
        self._close(p, "failed", "the worker stopped without finishing the run")
        record = run_record(store, p.live.run_id, p.problem, p.start, **where)
        if result.get("stopped_after_s") is not None:  # the task's own cap stopped its loop: runs again on resume
            return stopped_record(record, result["stopped_after_s"])
        return record

    def _close(self, p: _Problem, status: str, why: str) -> None:
        """Close the live attempt's run if its events did not (a no-op after its run_finished)."""
        if p.live is not None:
            p.live.recorder.abort(status, None if status == "cancelled" else why, why)
            p.live.recorder.close()

    def _beat(self, store, by_key: dict[str, _Problem]) -> None:
        now = time.monotonic()
        for p in by_key.values():
            if p.live is not None and not p.live.recorder.run_finished and now - p.live.beat_at >= HEARTBEAT_S:
                store.heartbeat(p.live.run_id, pid=os.getpid())
                p.live.beat_at = now

    def _poll_cancel(self, ray, store, pending: dict) -> None:
        """A cancel asked for in the app or with `runs cancel` stops that problem's task (and so the bench)."""
        for ref, p in pending.items():
            if p.live is not None and store.cancel_requested(p.live.run_id):
                ray.cancel(ref)

    def _interrupt(self, ray, store, mailbox, pending: dict, by_key: dict[str, _Problem]) -> None:
        """Ctrl-C: stop every task, write what their events said so far, close their runs as cancelled."""
        for ref in pending:
            ray.cancel(ref)
        try:
            self._deliver(store, by_key, ray.get(mailbox.drain.remote(), timeout=10))
        except ray.exceptions.RayError:
            pass  # the runs are closed below all the same; only their last events are missing
        for p in pending.values():
            self._close(p, "cancelled", "interrupted (Ctrl-C or SIGTERM)")


def _check_resources(ray, options: dict, target: str) -> int:
    """How many tasks asking for `options` the cluster can run at once (its devices for the target); UsageError
    when it can run none."""
    total = ray.cluster_resources()
    need = resource_names(options)
    missing = {k: v for k, v in need.items() if total.get(k, 0) < v}
    if missing:
        have = ", ".join(f"{k} {v:g}" for k, v in sorted(total.items()) if not k.startswith(("node:", "memory",
                                                                                              "object_store")))
        raise UsageError(f"no node of the Ray cluster offers what a {target!r} problem needs ("
                         + ", ".join(f"{k} {v:g}" for k, v in missing.items()) + f"); the cluster has: {have}")
    return max(1, min(int(total[k] // v) for k, v in need.items()))
