"""The candidate's process when a judge runs the evaluation (`harness.remote` is the judge's side).

It imports the problem (for ModelNew's init arguments and the reference's weights) and, when the judge says so, the
candidate, under the same guards as the one-process harness; then it answers the judge's requests: run the forward
on the inputs in the shared arena and write the outputs back, make inputs ready and flush the cache, time one
call with the clock bound before the candidate was imported, write a timed call's outputs back, report guard
findings, profile. It never sees a reference output, a tolerance, a seed or a verdict: there is none in this
process to read, patch or forge. Requests: one JSON object per SEQPACKET message (`harness.shared`); a new arena
comes as a descriptor with the request that first uses it.

Memory: this process keeps its own peaks per phase (`footprint.Phases`): "setup" (the problem and its reference
call, before the judge's first request), then the phase the judge names in a request's `phase` field (the first
request of each of its phases carries it; never a timed request or its fetch), and reports them when asked
(`memory`). Candidate code runs here, so the judge labels them as this process's own account and decides nothing
from them (`memory_account.candidate_memory`).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import torch

from ...errors import CompileError
from ...platform import get_platform
from . import conditions, context, device_arena, footprint, guards, launches, process_state
from .compare import fingerprint, flatten
from .correctness import outputs_from_kernels
from .in_process import describe_exception, guard_findings, load_candidate, profile_candidate
from .reference import ProblemFailure, _load_reference
from .shared import Arena, ProtocolError, check_sealed, prepare_pinning, read, recv, send, write


class _Worker:
    def __init__(self, request: dict, workdir: Path, sock: socket.socket):
        self.request, self.workdir, self.sock = request, workdir, sock
        self.platform = get_platform(request["target"])
        self.device = self.platform.device()
        self.arena: Arena | device_arena.DeviceArena | None = None
        self.fds: list[int] = []  # descriptors that came with the request being answered
        self.model = None
        self.inputs = None  # the last call's inputs, on this process's device (reused for an in-place rewrite)
        self.inputs_print = None  # their fingerprint as read from the arena (the mutation check)
        self.inputs_checked: bool | None = None  # the check's answer since the last call (asked once, given twice)
        self.pending = None  # a timed call's outputs, until fetched
        self.cand_path = str(workdir / "candidate.py")
        self.memory: footprint.Phases | None = None  # this process's peaks per phase (reported, never judged)

    def setup(self) -> None:
        context.request = dict(self.request)
        with guards.trusted():
            self.platform.prepare_child()
            prepare_pinning(self.device)
            device_arena.prepare(self.device)
            if self.device.type == "cuda":
                torch.cuda.init()  # the memory counts are the device's from the start (the reference runs there)
            footprint.hold_long_lived(self.platform)  # part of the process's start (made already if pre-started)
            self.memory = footprint.Phases(self.platform, held=True)
            self.memory.enter("setup")
        self.timer = self.platform.make_timer()  # binds the clock now, before any problem or candidate code exists
        self.state = guards.snapshot_state(registrations=False)
        guards.install()
        # The problem, and one call of its reference under the op recorder, before the judge asks for anything
        # (while it runs its own reference checks): the lazy imports a first forward pays (the dispatch-mode
        # machinery, sympy, ...) are paid here, as the one-process harness pays them in its reference checks, not
        # inside the candidate's first call and its time limit (seconds in a spawned child on a busy box).
        try:
            _, self.init, self.ref_model, make_inputs = _load_reference(self.request, self.workdir, self.platform)
            inputs = make_inputs(0)
            with torch.no_grad():
                guards.record_ops(lambda: self.ref_model(*inputs), set())
            self.platform.synchronize()
            inputs = None  # (the release below gives its memory back)
            self.problem_error = None
        except ProblemFailure as e:
            self.problem_error = str(e)
        except Exception as e:  # noqa: BLE001 - the judge runs the same reference and reports its failure itself
            self.problem_error = f"the reference Model raised {type(e).__name__}: {str(e)[:300]}"
        # that call's inputs and output, cached, go back to the device while the judge makes its own references
        with guards.trusted():
            footprint.release(self.platform)

    def serve(self) -> None:
        while True:
            try:
                msg, fds = recv(self.sock, max_fds=1)
            except EOFError:
                return
            op = msg.get("op")
            if "phase" in msg:
                self._enter_phase(msg["phase"])
            if fds and op != "arena":
                self._new_arena(fds[0])
            self.fds = fds if op == "arena" else []
            if op == "bye":
                return
            try:
                reply = getattr(self, f"op_{op}")(msg) if op in _OPS else {"error": f"unknown op {op!r}"}
                if self.arena is not None:
                    self.arena.sync()  # its copies into and out of the arena are done before the judge reads it
            except guards.GuardViolation as e:
                reply = {"violation": str(e)}
            except CompileError as e:
                reply = {"status": "compile_error", "reason": str(e), "compile_log": e.log}
            except BaseException as e:  # noqa: BLE001 - candidate code: SystemExit and KeyboardInterrupt too
                what = {"call": "ModelNew.forward", "time": "timing ModelNew"}.get(op, f"ModelNew ({op})")
                reply = {"status": "runtime_error", "reason": describe_exception(what, e, self.cand_path)}
            send(self.sock, reply)

    def _enter_phase(self, name) -> None:
        """The judge's phase begins with this request: the last phase's peaks are kept, the cached memory the last
        phase left is given back (correctness's poisoned blocks: a problem-sized tensor beside the timing phase's
        inputs and output, which the other processes need at KernelBench's sizes), the counters reset. Never fails a
        request (the account is a diagnosis, not part of the evaluation)."""
        if self.memory is None or not isinstance(name, str) or not 0 < len(name) <= 40 or name == self.memory.name:
            return
        try:
            with guards.trusted():
                self.memory.leave()
                footprint.release(self.platform)
                self.memory.enter(name)
        except Exception:  # noqa: BLE001 - the counters are torch's and /proc's; a failure only loses the account
            pass

    def _new_arena(self, fd: int) -> None:
        try:
            size = check_sealed(fd)
            arena = Arena(fd, size)
            with guards.trusted():
                arena.pin(self.device)
        except (ProtocolError, OSError, ValueError):
            os.close(fd)
            raise
        self._replace_arena(arena)

    def _replace_arena(self, arena) -> None:
        old, self.arena = self.arena, arena
        if old is not None:
            with guards.trusted():
                old.close()

    def _found(self, identities: bool) -> None:
        found = guard_findings(self.state, identities, registrations=False)
        if found:
            raise guards.GuardViolation(found)

    def _inputs(self, msg: dict, reuse: bool = False) -> list:
        into = self.inputs if reuse else None
        self.inputs = None  # the previous call's inputs go before new ones are read (unless read into)
        self.inputs = read(self.arena, msg["inputs"], self.device, into=into)
        self.inputs_print, self.inputs_checked = fingerprint(self.inputs), None
        return self.inputs

    def _inputs_changed(self) -> bool:
        """Whether the last call left its inputs other than they were read: fingerprinted here, on this process's
        device, rather than copied back for the judge to fingerprint on the host (at KernelBench's sizes two host
        passes and a device-to-host copy of gigabytes a call). The same trust as that copy, which this process
        made too; the fingerprint is harness code, watched by identity like the rest (guards)."""
        if self.inputs is None or self.inputs_print is None:
            return False
        if self.inputs_checked is None:  # a warm-up call's reply and the findings after it ask the same question
            # a subclass (whose methods would run in the check itself) is a change, whatever its values
            self.inputs_checked = any(type(t) is not torch.Tensor for t in flatten(self.inputs)
                                      if isinstance(t, torch.Tensor)) or fingerprint(self.inputs) != self.inputs_print
        return self.inputs_checked

    # ---------------------------------------------------------------- ops

    def op_load(self, msg: dict) -> dict:
        if self.problem_error is not None:
            return {"status": "runtime_error",
                    "reason": f"the candidate's process could not load the problem: {self.problem_error}"}
        context.set_candidate(Path(self.cand_path))
        model, loaded = load_candidate(Path(self.cand_path), self.platform, self.state, self.init, self.ref_model)
        self.ref_model = None  # its weights are copied; the reference is the judge's
        if model is None:
            return loaded
        self.model = model
        return {"ok": True, "training": model.training, "conditions": conditions.read(), **loaded}

    def op_arena(self, msg: dict) -> dict:
        """Map the judge's arena in device memory (`device_arena`); where that fails, the judge falls back to a
        host arena, so the failure is an answer, not an error."""
        fds, self.fds = self.fds, []
        size = msg.get("size")
        if len(fds) != 1 or not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            for fd in fds:
                os.close(fd)
            return {"ok": False, "why": "a device arena request without one descriptor and its size"}
        try:
            with guards.trusted():
                arena = device_arena.DeviceArena.open(fds[0], size, self.device)
        except (device_arena.HandoverUnavailable, RuntimeError, OSError) as e:
            os.close(fds[0])
            return {"ok": False, "why": str(e)[:300]}
        self._replace_arena(arena)
        return {"ok": True}

    def op_ping(self, msg: dict) -> dict:
        return {"ok": True}

    def op_memory(self, msg: dict) -> dict:
        """This process's peaks per phase (closing the phase open now): its own account, for the verdict's
        `memory` report (the judge validates and labels it)."""
        if self.memory is None:
            return {"memory": None}
        with guards.trusted():
            return {"memory": self.memory.peaks_report()}

    def _seed(self, msg: dict) -> None:
        """The judge's seed for the random numbers the next call draws (the reference ran right after it)."""
        seed = msg.get("rng_seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            self.platform.seed(seed)

    def _poison(self, msg: dict) -> None:
        """Fresh memory of the sizes the judge names, filled with NaN and freed before the forward, as the
        one-process harness does (correctness.py, step 2): an unwritten output buffer then holds NaN here too."""
        sizes = msg.get("poison")
        if isinstance(sizes, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes):
            self.platform.poison_allocations(sizes)

    def op_call(self, msg: dict) -> dict:
        inputs = self._inputs(msg, reuse=bool(msg.get("reuse")))
        self._poison(msg)
        self._seed(msg)
        launches.reset()
        ops: set[str] = set()

        def run():
            with torch.no_grad():
                out = self.model(*inputs)
            self.platform.synchronize()
            return out

        kernel_before, start = launches.kernel_ns(), time.perf_counter_ns()
        out = guards.record_ops(run, ops) if msg.get("record_ops") else run()
        forward_ns = time.perf_counter_ns() - start
        self._found(identities=True)
        layout, _ = write(self.arena, out, int(msg["out_offset"]))
        return {"out": layout, "launches": launches.snapshot(), "kernel_ns": launches.kernel_ns() - kernel_before,
                "forward_ns": forward_ns, "provenance": outputs_from_kernels(out, launches.touched()),
                "aten_ops": sorted(ops), "inputs_changed": self._inputs_changed()}

    def op_prep(self, msg: dict) -> dict:
        self._inputs(msg)
        self.pending = None
        self._seed(msg)
        process_state.class_call(self.platform, "flush_cache")  # the class's, watched by identity (guards)
        return {"ok": True}

    def op_time(self, msg: dict) -> dict:
        launches.reset()
        self.kernel_before = launches.kernel_ns()
        box = []
        inputs, self.inputs_checked = self.inputs, None  # a new call on them: the check is to be made again

        def call():
            with torch.no_grad():
                box.append(self.model(*inputs))

        ms = process_state.class_call(self.timer, "time_ms", call)  # the class's, watched by identity (guards)
        self.pending = box[0]
        # the GPU timer's lead-in (device time before its start, inside the judge's bracket), whether the call was
        # launched ahead of the device, and whether it left work running on another stream (platforms/cuda)
        last = getattr(self.timer, "last", None) or {}
        return {"ms": ms, **{k: last[k] for k in ("lead_in_ms", "clean", "left_running") if k in last}}

    def op_fetch(self, msg: dict) -> dict:
        # only the copy: the check between timed calls is the judge's next request (`findings`), so the CPU time
        # of a fetch is the copy's alone (the judge's deferred-work check, harness/cpu_check.py)
        out, self.pending = self.pending, None
        layout, _ = write(self.arena, out, int(msg["out_offset"]))
        return {"out": layout, "launches": launches.snapshot(),
                "kernel_ns": launches.kernel_ns() - self.kernel_before,
                "provenance": outputs_from_kernels(out, launches.touched())}

    def op_findings(self, msg: dict) -> dict:
        # after a timed call the input check comes here, not with the fetch: a fetch's CPU time must be its copy's
        found = {"found": guard_findings(self.state, bool(msg.get("identities", True)))}
        if msg.get("inputs"):
            found["inputs_changed"] = self._inputs_changed()
        return found

    def op_profile(self, msg: dict) -> dict:
        def make_inputs(seed: int):
            return self.inputs if self.inputs is not None else []

        return {"profile": profile_candidate(self.platform, self.model, make_inputs,
                                              share_only=bool(msg.get("share_only")))}


_OPS = {name[3:] for name in vars(_Worker) if name.startswith("op_")}


def serve(request: dict, workdir: Path) -> dict:
    """Answer the judge until it says bye or goes away. Returns a (diagnostic) result for the caller's log."""
    with guards.trusted():
        sock = socket.socket(fileno=int(request["peer_fd"]))
    worker = _Worker(request, workdir, sock)
    worker.setup()
    worker.serve()
    return {"status": "runtime_error", "reason": "the candidate's process has no verdict of its own"}
