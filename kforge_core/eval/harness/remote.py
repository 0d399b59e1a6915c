"""The judge's handle on the candidate's process: ModelNew as a model whose calls happen elsewhere.

The judge (`harness.run` with a `peer_fd`) never imports candidate code. It holds a `RemoteCandidate` where it would
hold ModelNew: calling it writes the inputs into the shared arena (`harness.shared`), asks the candidate's process
(`harness.worker`) to run its forward on them, and reads the outputs back into tensors of its own, on its own device.
What the judge keeps is its own: the inputs it made (private generator, seeds drawn here), the reference's outputs,
the tolerance, the comparison and the verdict. The candidate's process only ever sees inputs and returns outputs.

What the judge still takes from the candidate's process, as claims it cannot verify alone (docs/EVALUATOR.md, known
limits): launch counts and time inside compiled kernels (must-launch, custom share), whether its outputs came from
its kernels, the ATen ops its forward dispatched, guard findings, build records, the profile, and each timed call's
duration. None of them makes a verdict correct or a time shorter: a timed call's reported time must lie within the
judge's bracket around the request and counts as no less than the CPU time the caller read for that call spread
over every core (a report far below either is rejected: the CPU bound on every target, the bracket on
accelerators), and the caller's CPU probe shows work done after a call returned (`harness.cpu_check`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import time
import weakref

import torch

from ..cpu_probe import usable_cores
from . import context, device_arena, launches, memory_account, report_check, shared
from .cpu_check import CpuWatch
from .guards import GuardViolation

# the longest lead-in a timer may report (platforms/cuda DeviceClockTimer.LEAD_IN_MAX_US, with room for a device
# clocked lower than when its sleep was calibrated); it is also bounded by the bracket itself
LEAD_IN_LIMIT_MS = 8.0
# Requests that never carry the judge's phase (`memory_account`): the timed request and its fetch (their CPU time
# is the timed call's, cpu_check.py).
UNMARKED_OPS = ("time", "fetch")


class RemoteFailure(Exception):
    """The candidate's process reported a failure (status and reason as a verdict gives them), or misbehaved."""

    def __init__(self, status: str, reason: str, **extra):
        super().__init__(reason)
        self.status, self.reason, self.extra = status, reason, extra


class RemoteCandidate:
    def __init__(self, peer_fd: int, device: torch.device, cpu_fd: int | None = None):
        self.sock = socket.socket(fileno=peer_fd)
        # the caller's reading of this candidate's process's CPU time (harness/cpu_check.py), where it gave one
        self.cpu = CpuWatch(cpu_fd) if cpu_fd is not None else None
        self.last_cpu_ns: int | None = None  # the last request's CPU time in the candidate's process
        self.cores = usable_cores()
        self.device = device
        shared.prepare_pinning(device)
        device_arena.prepare(device)
        self.arena: shared.Arena | device_arena.DeviceArena | None = None
        # why tensors cross through host memory rather than the device's (None: not refused yet)
        self._device_refused: str | None = None if torch.device(device).type == "cuda" else "not a CUDA device"
        self.handover = ""  # the path the last arena took, for the verdict's checks
        self.out_reserve = 1 << 16
        self.next_rng_seed: int | None = None  # see seed_for_call
        self.next_poison: list[int] = []  # see poison_for_call
        self.training = False
        self.aten_ops: set[str] = set()
        # the last call's input tensors, weakly: whether the next call passes the very same tensors (an in-place
        # rewrite) is all that is asked of them, and a strong reference would keep a seed's inputs alive while the
        # next seed's are made (one more copy of the inputs at the correctness phase's peak)
        self._last_inputs: list[weakref.ref] = []
        self._staged: tuple[list[weakref.ref], dict, int] | None = None  # see stage
        self._unsent_fds: list[int] = []  # a new arena's descriptor, until a request carries it
        self._calls = 0
        # (reported ms, judge's wall ms, the CPU reading's lower bound in ms or None) per timed call
        self.timed: list[tuple[float, float, float | None]] = []
        # from the GPU timer's replies: its longest lead-in, calls launched ahead of the device ("clean"), calls that
        # left work running on another stream after they returned
        self.lead_in_ms = 0.0
        # the host and CPU time the judge's own timer spends around a call (timing.timer_overheads), set by the
        # judge: the same timer in this candidate's process spends as much, which is not the call's
        self.timer_overhead_ms, self.timer_cpu_ms = 0.0, 0.0
        self.clean_calls = 0
        self.left_running_calls = 0
        # the checked calls' forward time in the candidate's process (the judge's own bracket adds the channel and
        # the copies, which would understate the custom-kernel share)
        self.forward_ns = 0
        self.round_trip_ms: float | None = None
        self.conditions: dict | None = None  # what the candidate's process says it times under (conditions.read)
        # whether the last checked call (or, after check_between_calls, timed call) left its inputs changed: the
        # candidate's process fingerprints its own copy before and after (worker._inputs_changed)
        self.inputs_changed = False
        # the judge's phase (CANDIDATE_PHASES), told to the candidate's process with the next request that may carry
        # it, for that process's memory account (never a request of its own: no round trip is added)
        self.phase: str | None = None
        self._phase_sent: str | None = None
        self._unanswered = False  # a request was sent and its reply not read (the channel is out of step)

    # ------------------------------------------------------------------ channel

    def _ask(self, msg: dict, fds: list[int] = (), clock: list | None = None) -> dict:
        """One request and its reply. `clock` gets the judge's bracket around it (ms); the CPU probe's readings,
        when the watch is on, are taken outside that bracket."""
        if self.phase != self._phase_sent and msg.get("op") not in UNMARKED_OPS:
            msg, self._phase_sent = {**msg, "phase": self.phase}, self.phase
        cpu_before = self.cpu.before() if self.cpu is not None else None
        try:
            if self.arena is not None:
                self.arena.sync()  # this side's copies into and out of it are done before the other side acts
            t0 = time.perf_counter_ns()
            self._unanswered = True
            shared.send(self.sock, msg, fds)
            reply, extra = shared.recv(self.sock, max_fds=1)
            self._unanswered = False
            if clock is not None:
                clock.append((time.perf_counter_ns() - t0) / 1e6)
            if self.cpu is not None:
                self.last_cpu_ns = self.cpu.after(str(msg.get("op")), cpu_before)
        except (EOFError, ConnectionError, BrokenPipeError) as e:
            raise RemoteFailure("runtime_error", "the candidate's process ended before answering",
                                worker_lost=True) from e
        except shared.ProtocolError as e:
            raise RemoteFailure("rejected", f"the candidate's process broke the evaluation protocol: {e} "
                                            f"[rule no-patching]") from None
        for fd in extra:  # nothing the candidate's process sends carries a descriptor the judge wants
            os.close(fd)
        if reply.get("violation"):
            raise GuardViolation(str(reply["violation"])[:2000])
        if reply.get("status"):  # a failure, phrased as a verdict by the candidate's process
            fields = {k: reply[k] for k in ("compile_log", "builds") if k in reply}
            raise RemoteFailure(str(reply["status"]), str(reply.get("reason", ""))[:4000], **fields)
        return reply

    def close(self) -> None:
        try:
            shared.send(self.sock, {"op": "bye"})
        except OSError:
            pass
        self.sock.close()
        if self.cpu is not None:
            self.cpu.close()
        if self.arena is not None:
            self.arena.close()

    # ------------------------------------------------------------------ what run.py asks

    def load(self) -> tuple[object | None, dict]:
        """Have the candidate's process import and build ModelNew: (self, {"build_s", "builds"}) or (None,
        verdict fields)."""
        try:
            reply = self._ask({"op": "load"})
        except RemoteFailure as e:
            return None, {"status": e.status, "reason": e.reason, **e.extra}
        except GuardViolation as e:
            return None, {"status": "rejected", "reason": str(e)}
        self.training = bool(reply.get("training"))
        self.conditions = reply.get("conditions")
        return self, {"build_s": float(reply.get("build_s") or 0.0), "builds": list(reply.get("builds") or [])}

    @staticmethod
    def transfer_allowance_s(nbytes: int) -> float:
        """What one call's crossing of the arena may add to its time limit: inputs and outputs copied into and out
        of host shared memory and to and from the device in both processes (four copies, six counted for room),
        at a pessimistic 1 GB/s (host copies under gVisor, pageable PCIe). A 6 GiB KernelBench input and output
        took longer than the 10 s a checked call may take by itself."""
        return 6 * nbytes / 1e9

    def _take_rng_seed(self) -> int | None:
        seed, self.next_rng_seed = self.next_rng_seed, None
        return seed

    def expect_output_bytes(self, nbytes: int, count: int) -> None:
        """Room in the arena for outputs like the reference's, `count` tensors of `nbytes` in all (a larger output
        is described, not copied)."""
        self.out_reserve = max(self.out_reserve, nbytes + 2 * shared.ALIGN * max(count, 1))

    def after_call(self) -> None:
        pass  # the candidate's process checks its guards after every call and reports a violation in the reply

    def check_between_calls(self) -> None:
        """The cheap guard check after every warm-up and timed call, as in one process (a request of its own, after
        the outputs came back: a fetch's CPU time is then the copy's alone), with the check of the call's inputs
        (`inputs_changed`)."""
        reply = self._ask({"op": "findings", "identities": False, "inputs": True})
        self.inputs_changed = _changed_flag(reply)
        found = str(reply.get("found") or "")
        if found:
            raise GuardViolation(found)

    def resnapshot(self) -> None:
        pass  # the judge's own state is not the candidate's to change: it never ran here

    def findings(self, identities: bool = True) -> str:
        return str(self._ask({"op": "findings", "identities": identities}).get("found") or "")

    def profile(self, model, share_only: bool = False):
        self.phase = "profiling"
        return self._ask({"op": "profile", "share_only": share_only}).get("profile")

    def memory_report(self) -> dict:
        """The candidate's process's own account of its memory per phase, for the verdict's `memory` report (once
        the verdict is decided: nothing here changes it). Validated and labelled (`memory_account.candidate_memory`); where it
        cannot be had (the process ended, did not answer within its wait, or the channel is out of
        step), why."""
        if self._unanswered:
            return {"unavailable": "the candidate's process had not answered the judge's last request (it ended, "
                                   "or is still busy)"}
        try:
            self.sock.settimeout(memory_account.MEMORY_REPORT_WAIT_S)
            try:
                reply = self._ask({"op": "memory"})
            finally:
                self.sock.settimeout(None)
        except (RemoteFailure, GuardViolation) as e:
            return {"unavailable": f"the candidate's process did not report it: {str(e)[:200]}"}
        except OSError as e:  # TimeoutError included
            return {"unavailable": f"the candidate's process did not report it: {type(e).__name__}"}
        arena = {"arena_bytes": self.arena.size, "arena": "device" if isinstance(self.arena, device_arena.DeviceArena)
                 else "host"} if self.arena is not None else {}
        return {**memory_account.candidate_memory(reply.get("memory"), self.device), **arena}

    def train(self, mode: bool = True):
        return self

    def eval(self):
        return self

    # ------------------------------------------------------------------ calls

    def _put_inputs(self, inputs: tuple) -> tuple[dict, int]:
        need = shared.total_bytes(list(inputs)) + self.out_reserve
        if self.arena is None or self.arena.size < need:
            if self.arena is not None:
                self.arena.close()
                self.arena = None
            # exactly what this call needs: the outputs' room is the reference's (a candidate's larger output is
            # described, not copied), and KernelBench's 6 GiB tensors leave no memory for slack
            self.arena = self._new_arena(need)
        self._staged = None  # the arena's inputs are rewritten: no earlier staging describes them
        layout, end = shared.write(self.arena, list(inputs), 0)
        return layout, shared._align(end)

    def _new_arena(self, need: int):
        """An arena in device memory where the driver and the candidate's process take one (`device_arena`),
        else in host shared memory (its descriptor goes with the next request)."""
        reason = self._device_refused
        if reason is None:
            try:
                arena = device_arena.offer(need, self.device,
                                           lambda a: self._ask({"op": "arena", "size": a.size}, [a.fd]))
                self.handover = f"through device memory shared by descriptor (CUDA VMM, {arena.size / 2**30:.3g} GiB)"
                return arena
            except device_arena.HandoverUnavailable as e:
                reason = str(e)
                if e.lasting:  # the driver or the candidate's process refused: host memory from now on
                    self._device_refused = reason
        arena = shared.Arena.create(need)
        arena.pin(self.device)
        self._unsent_fds = [arena.fd]
        self.handover = "through host shared memory" + \
            (f" (device memory not shared: {reason})" if reason != "not a CUDA device" else "")
        return arena

    def _fds(self) -> list[int]:
        fds, self._unsent_fds = self._unsent_fds, []
        return fds

    def stage(self, inputs: list) -> list | None:
        """The candidate's copy of `inputs`, written into the arena now and returned as tensors over it (host
        memory, no copy of the judge's own); None where an input cannot cross that way. Called with exactly these
        tensors, the next call sends them as they are. The judge never takes values *from* these tensors for its
        own use: the candidate's process can write them at any time."""
        layout, out_offset = self._put_inputs(tuple(inputs))
        views = shared.views(self.arena, layout)
        if views is None:
            return None
        self._staged = ([weakref.ref(t) for t in _flat_tensors(views)], layout, out_offset)
        return views

    def _staged_layout(self, tensors: list[torch.Tensor]) -> tuple[dict, int] | None:
        if self._staged is None:
            return None
        refs, layout, out_offset = self._staged
        if len(refs) != len(tensors) or not all(r() is t for r, t in zip(refs, tensors)):
            return None
        return layout, out_offset

    def _take(self, reply: dict, copying=None):
        """Read the outputs out of the arena; merge the reported launch records. `copying`: a context that
        measures the judge's own cost of that read (the CPU check's yardstick)."""
        try:
            with copying or contextlib.nullcontext():
                out = shared.read(self.arena, reply.get("out"), self.device)
                self.arena.sync()  # the copy out is done before the next request lets the arena change
        except shared.ProtocolError as e:
            raise RemoteFailure("rejected", f"the candidate's process broke the evaluation protocol: {e} "
                                            f"[rule no-patching]") from None
        counts = reply.get("launches") or {}
        if not (isinstance(counts, dict) and all(isinstance(v, int) and v >= 0 for v in counts.values())):
            raise RemoteFailure("rejected", "the candidate's process sent malformed launch counts [rule no-patching]")
        launches.merge(counts, int(reply.get("kernel_ns") or 0), _flat_tensors(out), reply.get("provenance"))
        return out

    def __call__(self, *inputs):
        tensors = _flat_tensors(list(inputs))
        reuse = self._calls > 0 and len(tensors) == len(self._last_inputs) and \
            all(r() is t for r, t in zip(self._last_inputs, tensors))
        staged = self._staged_layout(tensors)
        layout, out_offset = staged if staged is not None else self._put_inputs(inputs)
        first = self._calls == 0
        self._calls += 1
        poison, self.next_poison = self.next_poison, []
        reply = self._ask({"op": "call", "inputs": layout, "out_offset": out_offset, "reuse": reuse,
                           "record_ops": first, "rng_seed": self._take_rng_seed(), "poison": poison}, self._fds())
        self._last_inputs = [weakref.ref(t) for t in tensors]
        del tensors
        if first:
            self.aten_ops = {str(op) for op in reply.get("aten_ops") or []}
        else:  # as the one-process protocol counts it: not the first (recorded) call
            ns = reply.get("forward_ns")
            self.forward_ns += ns if isinstance(ns, int) and ns > 0 else 0
        self.inputs_changed = _changed_flag(reply)
        return self._take(reply)

    def calibrate(self, n: int = 7) -> None:
        """The channel's own round trip (an empty request), subtracted from the judge's brackets."""
        samples: list[float] = []
        for _ in range(n):
            self._ask({"op": "ping"}, clock=samples)
        self.round_trip_ms = statistics.median(samples)

    def timed_call(self, inputs) -> tuple[float, object]:
        """One timed call: the candidate's process makes its inputs ready and flushes its cache, then times its
        forward with its own clock (bound before its import); the judge brackets that request with its clock.
        The time returned is the report, bounded from both sides by what the candidate's process cannot forge: above
        by the judge's bracket (a longer report is rejected), below by the CPU time the caller read for the call --
        the timed request's, plus what the process did after it returned until its outputs were delivered --
        divided by the cores this machine lets a process use (no process runs faster than its CPU time spread over
        every core). The bracket itself is not the time: on a busy machine it adds the scheduler's delay in waking
        each process, which eager, timed inside the judge, does not pay."""
        if self.round_trip_ms is None:
            self.calibrate()
        layout, out_offset = self._put_inputs(tuple(inputs))
        self._ask({"op": "prep", "inputs": layout, "rng_seed": self._take_rng_seed()}, self._fds())
        bracket: list[float] = []
        reply = self._ask({"op": "time"}, clock=bracket)
        wall_ms = bracket[0]
        ms = reply.get("ms")
        if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not 0 <= ms < 1e9:
            raise RemoteFailure("rejected", "the candidate's process reported no usable time [rule no-patching]")
        # the GPU timer's lead-in: device time spent before its start event, inside the bracket but not the call's
        lead = reply.get("lead_in_ms", 0.0)
        if not isinstance(lead, (int, float)) or isinstance(lead, bool) or not 0 <= lead <= LEAD_IN_LIMIT_MS:
            raise RemoteFailure("rejected", "the candidate's process reported an impossible timer lead-in "
                                            "[rule no-patching]")
        if ms + lead > wall_ms:
            raise RemoteFailure("rejected", f"the candidate's process reported a timed call of {ms:.4g} ms (after a "
                                            f"lead-in of {lead:.3g} ms), longer than the {wall_ms:.4g} ms the judge "
                                            f"measured around it [rule no-patching]")
        self.lead_in_ms = max(self.lead_in_ms, float(lead))
        self.clean_calls += reply.get("clean") is True
        self.left_running_calls += bool(reply.get("left_running"))
        wall_ms -= lead  # the bracket around the call itself, as the lower bound below reads it
        time_cpu_ns = self.last_cpu_ns
        idle_before = self.cpu.idle_ns if self.cpu is not None else 0
        fetched = self._ask({"op": "fetch", "out_offset": out_offset})
        if self.cpu is None:  # no CPU probe: the bracket alone bounds the report
            self.timed.append((float(ms), wall_ms, None))
            return float(ms), self._take(fetched)
        fetch_cpu_ns, copy_before = self.last_cpu_ns, self.cpu.judge_copy_ns
        out = self._take(fetched, self.cpu.copying())
        cpu_ms = None
        if time_cpu_ns is not None and fetch_cpu_ns is not None:
            # the call's work as the CPU readings show it: inside the timed request, plus what ran after it returned
            # until its outputs were delivered (between the two requests, and a fetch beyond its copy)
            after_ns = (self.cpu.idle_ns - idle_before) + \
                self.cpu.fetch_excess(fetch_cpu_ns, self.cpu.judge_copy_ns - copy_before)
            cpu_ms = max(0.0, (time_cpu_ns + after_ns) / 1e6 - self.timer_cpu_ms) / self.cores
        self.timed.append((float(ms), wall_ms, cpu_ms))
        return max(float(ms), cpu_ms or 0.0), out

    def timing_check(self, strict: bool) -> tuple[dict, str]:
        """The cross-check of the reported durations against the judge's brackets and CPU readings
        (`report_check.judge`): (a check for the verdict, a warning or ""); RemoteFailure where it rejects."""
        check, warning, rejected = report_check.judge(self, strict)
        if rejected:
            raise RemoteFailure("rejected", rejected)
        return check, warning

    def cpu_check(self) -> tuple[dict, str] | None:
        """The deferred-work check (harness/cpu_check.py): (a check, a rejection reason or ""), None without a
        probe."""
        return self.cpu.judge() if self.cpu is not None else None


def _changed_flag(reply: dict) -> bool:
    flag = reply.get("inputs_changed", False)
    if not isinstance(flag, bool):
        raise RemoteFailure("rejected", "the candidate's process sent a malformed input check [rule no-patching]")
    return flag


def _flat_tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in _flat_tensors(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in _flat_tensors(item)]
    return []


def connect(request: dict, device: torch.device, name: str = "") -> RemoteCandidate | None:
    """The judge's handle when the caller gave this process a peer (the candidate's process), else None; in a
    contest, contender `name`'s (`peer_fd_<name>`). Its CPU probe comes as `cpu_fd` / `cpu_fd_<name>`."""
    suffix = f"_{name}" if name else ""
    fd = request.get(f"peer_fd{suffix}")
    if fd is None:
        return None
    context.request = dict(request)
    cpu_fd = request.get(f"cpu_fd{suffix}")
    return RemoteCandidate(int(fd), device, int(cpu_fd) if cpu_fd is not None else None)
