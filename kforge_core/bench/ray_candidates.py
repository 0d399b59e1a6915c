"""Best-of-k on Ray: each candidate's evaluation a Ray task of its own, on a free device of the cluster.

A bench with --best-of K on a cluster runs each problem's synthesis loop as a *coordinator* task that holds no
device (ray_driver.coordinator_resources): it generates the step's K programs, sends each to `evaluate_task`
(asking for one device, as a problem's task does without best-of-k) and waits; the loop records the verdicts in
iteration order and keeps the best, as on one machine (loop/streaming.EvaluationAhead). The end-of-run
head-to-head re-timing of the best candidates is one task too, so the final best is timed on one device.

A coordinator holds no resource while it waits for its candidates' devices, so no set of problems can hold every
device (or, on a CPU cluster, every core) and wait for one more: a deadlock. The loop waits for its candidates in
threads, and Ray lends a task's CPU to others only while the task's main thread waits, so even a CPU would stay
held; the driver bounds the coordinators out at once instead (ray_driver.COORDINATOR_RESOURCES).

Each task builds its own evaluation (sandbox, caches, ceilings of its node) and stops the run's warm baseline
server when it ends: the next candidate may land on another node, and a Ray worker process outlives the task.
"""

from __future__ import annotations

import socket
import threading

import ray

from ..errors import KForgeError
from ..eval.evaluator import EvalOptions, EvaluationCancelled, evaluate, head_to_head
from ..platform import Platform, get_platform
from ..problem import Problem, load_problem

CANCEL_POLL_S = 0.25


def where_am_i() -> dict:
    """The node this task runs on: Ray's node id, its address and host name."""
    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "node": f"{socket.gethostname()} ({ray.util.get_node_ip_address()})"}


def _on_device(fn, problem_source: str, problem_name: str, payload, target: str, options: EvalOptions):
    """Run `fn` (evaluate or head_to_head) here; returns (its result, where it ran). A KForgeError (no such
    target here, an unusable problem) comes back as the task's error."""
    from ..eval import baselines

    here = where_am_i()
    platform = get_platform(target, require_available=True)
    here["device"] = platform.device_name()
    problem = load_problem(text=problem_source, name=problem_name)
    try:
        return fn(problem, payload, target, options), here
    finally:
        baselines.release(baselines.key_for(problem.source, options.size_class, platform.name, here["device"]))


def probe_device(target: str) -> dict:
    """Where a candidate of `target` would run: node and device name, or the error that node gives."""
    here = where_am_i()
    try:
        here["device"] = get_platform(target, require_available=True).device_name()
    except KForgeError as e:
        here["error"] = f"on node {here['node']}: {e}"
    return here


class ClusterEvaluator:
    """`evaluate` and `head_to_head` with the evaluator's signatures, each call a Ray task asking for
    `resources` (cluster.task_resources). Called from the loop's threads, several at once."""

    def __init__(self, resources: dict, max_retries: int):
        options = dict(resources, max_retries=max_retries, retry_exceptions=False)
        self._task = ray.remote(_on_device).options(**options)
        self._probe = ray.remote(probe_device).options(**options)
        self.places: list[dict] = []  # where each evaluation ran, in the order they finished
        self._lock = threading.Lock()

    def probe(self, target: str) -> dict:
        """A device of the cluster names itself (the agents are told which device they write for)."""
        return ray.get(self._probe.remote(target))

    def evaluate(self, problem: Problem, candidate_source: str, target: str, options: EvalOptions | None = None,
                 *, on_stage=None, cancel=None):
        return self._call(evaluate, problem, candidate_source, target, options, on_stage, cancel)

    def head_to_head(self, problem: Problem, programs: dict[int, str], target: str,
                     options: EvalOptions | None = None, *, on_stage=None, cancel=None) -> dict:
        return self._call(head_to_head, problem, programs, target, options, on_stage, cancel)

    def _call(self, fn, problem: Problem, payload, target: str, options, on_stage, cancel):
        options = options or EvalOptions()
        ref = self._task.remote(fn, problem.source, problem.name, payload, target, options)
        if on_stage is not None:
            on_stage({"stage": "waiting for a device of the cluster"})
        stop = threading.Event()
        if cancel is not None:  # a cancel asked for while blocked in ray.get: the task is cancelled under it
            threading.Thread(target=_cancel_on, args=(ref, cancel, stop), daemon=True,
                             name="kforge-ray-cancel").start()
        try:
            result, where = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            raise EvaluationCancelled() from None
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, KForgeError):  # the evaluator's own clear errors, as if it ran here
                raise e.cause from None
            raise
        finally:
            stop.set()
        with self._lock:
            self.places.append(where)
        if on_stage is not None:
            on_stage({"stage": f"evaluated on {where['node']}", "node": where["node"], "node_id": where["node_id"],
                      "device": where["device"]})
        return result


def _cancel_on(ref, cancel, stop: threading.Event) -> None:
    while not stop.wait(CANCEL_POLL_S):
        if cancel():
            ray.cancel(ref)  # KeyboardInterrupt in the task: the evaluator kills its child's process group
            return


class NamedDevice:
    """The target's platform as a coordinator sees it: everything of the platform, but `device_name` is the
    cluster's device its candidates are evaluated on (the coordinator itself holds none)."""

    def __init__(self, platform: Platform, device: str):
        self._platform, self._device = platform, device

    def device_name(self) -> str:
        return self._device

    def __getattr__(self, name: str):
        return getattr(self._platform, name)
