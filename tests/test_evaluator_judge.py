"""The judge: inputs, reference, comparison, eager timing and verdict in a process that never imports the candidate.

The hostile candidates here reach into their own process the way one that got past the static rules and the
guards would (sys._getframe, sys.modules, gc, object.__setattr__): the rules and guards are disarmed for them
(KFORGE_UNSAFE_DISARM=1, read by the harness in both processes; every such verdict carries a warning saying so).
Each case runs twice: in one process (KFORGE_JUDGE=0), where the attack works -- proof that the case attacks
something -- and with the judge, where it must fail because the judge is out of its reach. Plus the shared-memory
transport's own unhappy paths, without child processes.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch

from candidates.evalkit import HONEST, HOSTILE, PROBLEMS, QUICK_TIMING, Case, run_case
from kforge_core.eval.harness import shared

SWISH = PROBLEMS / "swish_small.py"
EXAMPLE_PROBLEM = Path(__file__).resolve().parent.parent / "platforms" / "examples" / "cpu" / "problem.py"


def _judged_and_alone(monkeypatch, name: str, problem=SWISH, **options):
    monkeypatch.setenv("KFORGE_UNSAFE_DISARM", "1")
    c = Case(name, problem, HOSTILE / f"{name}.py", {"timing": False, **options})
    monkeypatch.setenv("KFORGE_JUDGE", "0")
    alone = run_case(c)
    monkeypatch.setenv("KFORGE_JUDGE", "1")
    judged = run_case(c)
    return alone, judged


def _says_disarmed(v) -> None:
    assert any("disarmed" in w for w in v.warnings), (v.status, v.reason, v.warnings)


def test_verdict_forged_through_the_harness_frame(monkeypatch):
    """The nonce and the result descriptor read from the harness's frame: `correct` in one process; with the
    judge the frame is the candidate's process's own, whose result nobody reads: it ended without a verdict."""
    alone, judged = _judged_and_alone(monkeypatch, "judge_forge_result_channel")
    assert alone.status == "correct" and "forged" in alone.reason, (alone.status, alone.reason)
    assert judged.status == "runtime_error", (judged.status, judged.reason, judged.log_tail)
    assert "exited with code 0" in judged.reason and "forged" not in judged.reason


def test_tolerance_loosened_in_place(monkeypatch):
    """Every tolerance policy object rewritten to 1e30 at import: `correct` in one process, `incorrect` with the
    judge (its policies are in its own process)."""
    alone, judged = _judged_and_alone(monkeypatch, "judge_loosen_tolerance")
    assert alone.status == "correct", (alone.status, alone.reason)
    assert judged.status == "incorrect" and "outside atol=0.0001" in judged.reason, (judged.status, judged.reason)
    _says_disarmed(judged)


def test_comparison_patched(monkeypatch):
    """compare_outputs and tensors_equal replaced in every harness module: `correct` in one process,
    `incorrect` with the judge."""
    alone, judged = _judged_and_alone(monkeypatch, "judge_patch_compare")
    assert alone.status == "correct", (alone.status, alone.reason)
    assert judged.status == "incorrect", (judged.status, judged.reason)
    _says_disarmed(judged)


def test_candidate_timer_forged(monkeypatch):
    """The timer in the candidate's process made to report 1 µs per call. In one process the candidate's time
    is the forged one and eager's too (same timer). With the judge, eager is timed by the judge (not forged), and
    the forged reports fall far below the CPU time the caller read for the timed requests (over every core of the
    machine): rejected on every target (harness/remote.py, timing_check; on accelerators the judge's brackets
    reject it too). The CPU example's sizes: a call of about a millisecond."""
    alone, judged = _judged_and_alone(monkeypatch, "judge_forge_timer", EXAMPLE_PROBLEM, **QUICK_TIMING)
    assert alone.status == "correct" and alone.candidate_ms < 0.01 and alone.eager_ms < 0.01, \
        (alone.candidate_ms, alone.eager_ms)
    assert judged.status == "rejected", (judged.status, judged.reason)
    assert "below the CPU time they used" in judged.reason and "[rule no-patching]" in judged.reason, judged.reason
    _says_disarmed(judged)


@pytest.mark.parametrize("name", ["judge_defer_thread", "judge_defer_signal"])
def test_work_deferred_past_the_call(monkeypatch, name):
    """Most of the kernel's work deferred to a thread, or to a signal handler, after the call returned; the outputs
    are finished before anything reads them. In one process: `correct` (and timed at one row's cost). With the
    judge: rejected, the caller having read the candidate's process's CPU time around each request
    (harness/cpu_check.py): the work shows after the timed calls returned, or inside the timed requests far above
    what the report claims (harness/remote.py, timing_check)."""
    alone, judged = _judged_and_alone(monkeypatch, name, EXAMPLE_PROBLEM, **QUICK_TIMING)
    assert alone.status == "correct", (alone.status, alone.reason, alone.log_tail)
    assert judged.status == "rejected", (judged.status, judged.reason, judged.checks)
    assert "[rule no-deferred-work]" in judged.reason or "below the CPU time they used" in judged.reason, \
        judged.reason


@pytest.mark.parametrize("name,problem,options,status,says", [
    ("stale_buffer", SWISH, {}, "incorrect", ""),
    ("cache_data_ptr", SWISH, {}, "incorrect", ""),
    ("mutate_inputs", SWISH, {}, "incorrect", "modified its inputs"),
    ("first_output_only", PROBLEMS / "multi_output.py", {}, "incorrect", "output 1"),
    ("warmup_detect", SWISH, QUICK_TIMING, "incorrect", "timed call"),
])
def test_output_tricks_caught_with_the_rules_disarmed(monkeypatch, name, problem, options, status, says):
    """Tricks on the outputs (shared/EVAL_PITFALLS.md) are the judge's to catch, not the guards': with the static
    rules and guards disarmed, the judge still gives each one its verdict."""
    monkeypatch.setenv("KFORGE_UNSAFE_DISARM", "1")
    monkeypatch.setenv("KFORGE_JUDGE", "1")
    v = run_case(Case(f"disarmed_{name}", problem, HOSTILE / f"{name}.py", {"timing": False, **options}))
    assert v.status == status and says in v.reason, (v.status, v.reason)
    _says_disarmed(v)


def test_contest_is_judged_per_contender(monkeypatch):
    """A head-to-head contest: the honest CPU example against the deferred-work thread (rules and guards disarmed).
    Judged, each contender runs in its own candidate's process and the judge's checks on its reported times fail
    the deferring one, by name."""
    from kforge_core.eval.evaluator import EvalOptions, head_to_head
    from kforge_core.problem import load_problem

    monkeypatch.setenv("KFORGE_UNSAFE_DISARM", "1")
    monkeypatch.setenv("KFORGE_JUDGE", "1")
    programs = {1: (EXAMPLE_PROBLEM.parent / "candidate.py").read_text(),
                2: (HOSTILE / "judge_defer_thread.py").read_text()}
    result = head_to_head(load_problem(path=EXAMPLE_PROBLEM), programs, "cpu",
                          EvalOptions(**{k: v for k, v in QUICK_TIMING.items() if k != "timing"}))
    assert "error" in result and "c2:" in result["error"], result
    assert "below the CPU time they used" in result["error"] or "[rule no-deferred-work]" in result["error"], result


def test_honest_candidate_is_judged_out_of_process(monkeypatch):
    """An honest candidate, timed: `correct`, with the judge's checks in the verdict and no disarm warning."""
    monkeypatch.delenv("KFORGE_UNSAFE_DISARM", raising=False)
    monkeypatch.setenv("KFORGE_JUDGE", "1")
    v = run_case(Case("judged_honest", SWISH, HONEST / "swish_newmodel.py", {**QUICK_TIMING}))
    assert v.status == "correct", (v.reason, v.log_tail)
    names = [c["name"] for c in v.checks]
    assert "judged out of process" in names and "judge's clock" in names, names
    detail = next(c["detail"] for c in v.checks if c["name"] == "judged out of process")
    assert detail.endswith("tensors crossed through host shared memory"), detail  # no device to share on the CPU
    cpu = next(c for c in v.checks if c["name"] == "CPU time outside calls")
    assert cpu["passed"] and "not checked" not in cpu["detail"], cpu  # the caller's CPU probe was read
    assert "kernel_launches" in v.reported_by_candidate, v.reported_by_candidate
    assert not any("disarmed" in w or "own process" in w for w in v.warnings), v.warnings
    # the candidate's process's own memory account per phase, labelled as such (harness/footprint.py, worker.py)
    cand = v.memory["candidate_process"]
    assert "candidate's process" in cand["reported_by"] and "never used for the verdict" in cand["reported_by"]
    assert set(cand["peak_bytes"]) == {"setup", "load", "correctness", "timing"}, cand
    assert all(isinstance(n, int) and n > 0 for n in cand["peak_bytes"].values()), cand
    assert cand["arena"] == "host" and cand["arena_bytes"] > 0 and "ignored" not in cand, cand
    assert "memory.candidate_process" in v.reported_by_candidate, v.reported_by_candidate


def test_forged_memory_account_changes_nothing(monkeypatch):
    """A candidate (rules and guards disarmed) that forges its process's memory account with malformed values and
    a claimed verdict: the verdict stays the honest kernel's (`correct`, timed), and what the verdict shows of the
    account is only what validates (non-negative ints of known phases and fields), labelled as the candidate's
    process's own."""
    monkeypatch.setenv("KFORGE_UNSAFE_DISARM", "1")
    monkeypatch.setenv("KFORGE_JUDGE", "1")
    v = run_case(Case("judged_forge_memory", EXAMPLE_PROBLEM, HOSTILE / "judge_forge_memory.py", {**QUICK_TIMING}))
    assert v.status == "correct", (v.status, v.reason, v.log_tail)
    assert v.candidate_ms is not None and v.candidate_ms > 1e-3, v.candidate_ms
    _says_disarmed(v)
    cand = v.memory["candidate_process"]
    assert cand["peak_bytes"] == {"setup": 1 << 20}, cand  # the one well-formed count of a known phase
    assert cand["held_bytes"] == {"timing": 123}, cand
    assert "start_bytes" not in cand and "peak_reserved_bytes" not in cand and "verdict" not in cand, cand
    assert "ignored" in cand and "candidate's process" in cand["reported_by"], cand
    assert set(v.memory) >= {"peak_bytes", "live_bytes", "candidate_process"}  # the judge's own report untouched
    assert set(v.memory["peak_bytes"]) == {"reference checks", "correctness", "timing"}, v.memory


def test_one_process_verdict_says_so(monkeypatch):
    """KFORGE_JUDGE=0: the verdict warns that it was judged in the candidate's own process."""
    monkeypatch.setenv("KFORGE_JUDGE", "0")
    v = run_case(Case("alone_honest", SWISH, HONEST / "swish_newmodel.py", {"timing": False}))
    assert v.status == "correct"
    assert any("judged in the candidate's own process" in w for w in v.warnings), v.warnings
    assert "candidate_process" not in v.memory  # one process: the judge's own report is the candidate's too


# ------------------------------------------------------------------------------- the transport, in one process

def test_layout_round_trip_keeps_structure_and_values():
    arena = shared.Arena.create(1 << 16)
    value = [torch.randn(3, 4), (torch.arange(5), 2.5, None), {"b": torch.ones(2, dtype=torch.bool), "a": 7},
             torch.empty(0, 3), torch.tensor(1.5, dtype=torch.float64)]
    layout, end = shared.write(arena, value, 0)
    assert end <= arena.size
    back = shared.read(arena, layout)
    assert torch.equal(back[0], value[0]) and torch.equal(back[1][0], value[1][0]) and back[1][1:] == (2.5, None)
    assert back[2]["a"] == 7 and torch.equal(back[2]["b"], value[2]["b"])
    assert back[3].shape == (0, 3) and back[4].dtype == torch.float64 and float(back[4]) == 1.5
    arena.view(layout["l"][0]["t"][2], 4, torch.uint8).fill_(0)  # a later write in the arena changes no copy
    assert torch.equal(back[0], value[0])


def test_in_place_read_keeps_the_same_tensors():
    arena = shared.Arena.create(1 << 16)
    first = [torch.randn(8)]
    layout, _ = shared.write(arena, [torch.randn(8)], 0)
    again = shared.read(arena, layout, into=first)
    assert again[0] is first[0]


def test_output_too_large_is_described_not_copied():
    arena = shared.Arena.create(1 << 16)
    big = torch.zeros(1 << 16)  # 256 KiB: more than the arena
    layout, _ = shared.write(arena, big, 0)
    assert layout.get("nofit")
    back = shared.read(arena, layout)
    assert back.device.type == "meta" and back.shape == big.shape


def test_tensor_subclass_comes_back_as_a_subclass():
    class Sneaky(torch.Tensor):
        pass

    arena = shared.Arena.create(1 << 16)
    layout, _ = shared.write(arena, torch.Tensor._make_subclass(Sneaky, torch.ones(3)), 0)
    back = shared.read(arena, layout)
    assert type(back).__name__ == "Sneaky" and type(back) is not torch.Tensor


@pytest.mark.parametrize("layout", [
    {"t": ["torch.float32", [4], 1 << 20]},  # outside the arena
    {"t": ["torch.float32", [4], 3]},  # misaligned
    {"t": ["torch.qint8", [4], 0]},  # unknown dtype
    {"t": ["torch.float32", [-1], 0]},  # negative size
    {"t": ["torch.float32", "4", 0]},
    {"l": "nope"},
    {"v": [1, 2]},
    "junk",
])
def test_malformed_layouts_are_refused(layout):
    arena = shared.Arena.create(1 << 16)
    with pytest.raises(shared.ProtocolError):
        shared.read(arena, layout)


def test_arena_pins_only_large_cuda_mappings(monkeypatch):
    """Page-locking is for the CUDA device and arenas worth it; elsewhere copies stay as they were, and a driver
    that refuses leaves the arena usable."""
    small, large = shared.Arena.create(1 << 16), shared.Arena.create(shared.PIN_MIN_BYTES)
    assert not large.pin("cpu") and not small.pin("cuda")
    calls = []
    monkeypatch.setitem(shared._driver, "register", lambda ptr, size, flags: calls.append((size, flags)) or 201)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    assert not large.pin("cuda") and not large.pinned  # refused (CUDA_ERROR_INVALID_CONTEXT): pageable copies
    assert calls == [(large.size, 1)]
    large.view(0, 4, torch.uint8).copy_(torch.arange(4, dtype=torch.uint8))
    assert large.view(0, 4, torch.uint8).tolist() == [0, 1, 2, 3]
    small.close()
    large.close()


def test_device_arena_refuses_what_it_cannot_share(monkeypatch):
    """The device arena is CUDA's, and off when the caller said so: both refusals name their reason, which the
    judge puts in its check as it falls back to the host arena (tests/gpu/test_gpu_handover.py: the GPU side)."""
    from kforge_core.eval.harness import context, device_arena

    with pytest.raises(device_arena.HandoverUnavailable, match="not a CUDA device"):
        device_arena.DeviceArena.create(1 << 20, "cpu")
    monkeypatch.setattr(context, "request", {"device_handover": False})
    with pytest.raises(device_arena.HandoverUnavailable, match="KFORGE_DEVICE_HANDOVER=0"):
        device_arena.DeviceArena.create(1 << 20, "cuda")


def test_arena_cannot_be_resized_by_the_other_side():
    """The judge maps the arena; were the candidate's process able to truncate it, reading would be a SIGBUS."""
    arena = shared.Arena.create(1 << 16)
    with pytest.raises(PermissionError):
        os.ftruncate(arena.fd, 0)
    with pytest.raises(PermissionError):
        os.ftruncate(arena.fd, 1 << 20)
    assert shared.check_sealed(arena.fd) == arena.size


def test_unsealed_buffer_is_refused():
    fd = os.memfd_create("plain")
    try:
        os.ftruncate(fd, 4096)
        with pytest.raises(shared.ProtocolError):
            shared.check_sealed(fd)
    finally:
        os.close(fd)


def test_messages_long_and_short_and_garbage():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        shared.send(a, {"op": "ping"})
        assert shared.recv(b) == ({"op": "ping"}, [])
        long = {"profile": "x" * (shared.MAX_MESSAGE + 10)}
        shared.send(a, long)
        assert shared.recv(b)[0] == long
        a.send(b"not json")
        with pytest.raises(shared.ProtocolError):
            shared.recv(b)
        a.send(b"[1, 2]")
        with pytest.raises(shared.ProtocolError):
            shared.recv(b)
        a.close()
        with pytest.raises(EOFError):
            shared.recv(b)


def test_worker_answers_a_device_arena_it_cannot_map(tmp_path):
    """The candidate's process answers an `arena` request it cannot honour (no descriptor, a CPU device, a
    descriptor that is not CUDA memory) with why, closing what it was sent; the judge then falls back to host
    memory. It never raises out of the request."""
    from kforge_core.eval.harness.worker import _Worker

    a, b = socket.socketpair()
    worker = _Worker({"target": "cpu"}, tmp_path, a)
    assert worker.op_arena({"size": 4096}) == {"ok": False, "why": "a device arena request without one descriptor "
                                                                    "and its size"}
    fd = os.memfd_create("not-cuda")
    worker.fds = [fd]
    reply = worker.op_arena({"size": 4096})
    assert reply["ok"] is False and "not a CUDA device" in reply["why"], reply
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    assert worker.arena is None
    a.close()
    b.close()


def test_device_arena_offer_falls_back_for_the_right_reasons(monkeypatch):
    """The judge's offer of a device arena (the driver faked): too little room refuses this arena only; the other
    side's refusal refuses for the rest of the evaluation and frees the arena; an accepted one is returned."""
    from kforge_core.eval.harness import device_arena

    class Fake:
        size, fd, closed = 4096, 99, False

        def close(self):
            self.closed = True

    made = []
    monkeypatch.setattr(device_arena, "_usable", lambda device: 0)
    monkeypatch.setattr(device_arena.DeviceArena, "create",
                        classmethod(lambda cls, n, d: made.append(Fake()) or made[-1]))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 << 30, 80 << 30))
    with pytest.raises(device_arena.HandoverUnavailable, match="too little") as e:
        device_arena.offer(1 << 30, "cuda", lambda a: {"ok": True})
    assert not e.value.lasting and not made
    with pytest.raises(device_arena.HandoverUnavailable, match="could not map it: no VMM here") as e:
        device_arena.offer(1 << 20, "cuda", lambda a: {"ok": False, "why": "no VMM here"})
    assert e.value.lasting and made[-1].closed
    assert device_arena.offer(1 << 20, "cuda", lambda a: {"ok": True}) is made[-1] and not made[-1].closed


# ------------------------------------------------------------------ the candidate's process's memory account

def test_memory_account_is_validated():
    """Only the judge's phase names and fields, each a non-negative int below 1 PiB, pass; the measure is named by
    the judge; anything else is dropped and counted."""
    from kforge_core.eval.harness.memory_account import candidate_memory

    good = {"start_bytes": 10, "peak_bytes": {"setup": 5, "timing": 7}, "held_bytes": {"timing": 0}}
    out = candidate_memory(good, "cpu")
    assert out["peak_bytes"] == {"setup": 5, "timing": 7} and out["start_bytes"] == 10 and "ignored" not in out
    assert out["measure"].startswith("VmHWM") and "candidate's process" in out["reported_by"]
    assert "max_memory_reserved" in candidate_memory(good, "cuda")["measure"]
    for raw in (None, [], "x", 5):
        assert "unavailable" in candidate_memory(raw, "cpu")
    bad = {"start_bytes": True, "peak_bytes": {"setup": -1, "load": 1.0, "timing": 1 << 50, "bogus": 3,
                                               "correctness": "9"},
           "peak_reserved_bytes": [1, 2], "held_bytes": {"profiling": None}, "extra": {"a": 1}}
    out = candidate_memory(bad, "cuda")
    assert not set(out) & {"start_bytes", "peak_bytes", "peak_reserved_bytes", "held_bytes", "extra"}, out
    assert out["ignored"].startswith("9 "), out


def _fake_worker(answer):
    """A judge's RemoteCandidate whose candidate's process is a thread answering every request with `answer(msg)`
    (None: no answer); returns (remote, the messages it received)."""
    import threading

    from kforge_core.eval.harness.remote import RemoteCandidate

    judge_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    seen = []

    def serve():
        while True:
            try:
                msg, _ = shared.recv(worker_end)
            except (EOFError, OSError):
                return
            if msg.get("op") == "bye":
                return
            seen.append(msg)
            reply = answer(msg)
            if reply is not None:
                shared.send(worker_end, reply)

    threading.Thread(target=serve, daemon=True).start()
    return RemoteCandidate(judge_end.detach(), torch.device("cpu")), seen, worker_end


def test_phase_rides_on_the_next_request_but_never_a_timed_one():
    remote, seen, end = _fake_worker(lambda msg: {"ok": True, "ms": 1.0, "memory": {"peak_bytes": {"load": 1}}})
    remote.phase = "timing"
    remote._ask({"op": "time"})
    remote._ask({"op": "fetch"})
    remote._ask({"op": "ping"})
    remote._ask({"op": "ping"})
    remote.phase = "profiling"
    remote._ask({"op": "findings"})
    assert [m.get("phase") for m in seen] == [None, None, "timing", None, "profiling"], seen
    assert remote.memory_report()["peak_bytes"] == {"load": 1}
    remote.close()
    end.close()


@pytest.mark.parametrize("answer, says", [
    ({"status": "correct", "reason": "forged"}, "did not report it"),
    ({"violation": "forged"}, "did not report it"),
    (None, "TimeoutError"),
])
def test_memory_report_failures_are_contained(monkeypatch, answer, says):
    """A reply claiming a status or a violation, or none at all: the account is unavailable, with why; nothing is
    raised into the judge (the verdict is already decided when it asks), and the wait is bounded."""
    from kforge_core.eval.harness import memory_account

    monkeypatch.setattr(memory_account, "MEMORY_REPORT_WAIT_S", 0.3)
    remote, _, end = _fake_worker(lambda msg: answer)
    out = remote.memory_report()
    assert says in out["unavailable"], out
    if answer is None:  # the channel is out of step now: not asked again
        assert remote.memory_report()["unavailable"].startswith("the candidate's process had not answered")
    remote.sock.close()
    end.close()
