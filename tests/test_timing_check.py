"""The judge's checks of a candidate's reported times (`RemoteCandidate.timed_call` and `timing_check`) with the GPU
timer's lead-in: the device time the timer spends before its start event is inside the judge's bracket but not the
call's, so it is taken out of the bracket (an honest report stays above the floor), a lead-in the bracket cannot
hold is refused, and a forged report still fails. A process stands in for nothing here: the requests are answered
by a stub with the replies a candidate's process gives."""

from __future__ import annotations

import pytest

from kforge_core.eval.harness.remote import RemoteCandidate, RemoteFailure


class _Stub(RemoteCandidate):
    """The judge's bookkeeping of `RemoteCandidate`, its requests answered here: the `time` request with `reply`,
    bracketed by the judge at `wall_ms`."""

    def __init__(self, reply: dict, wall_ms: float):
        self.reply, self.wall_ms = reply, wall_ms
        self.timed, self.round_trip_ms, self.cores, self.cpu = [], 0.05, 16, None
        self.lead_in_ms, self.clean_calls, self.left_running_calls = 0.0, 0, 0
        self.timer_overhead_ms, self.timer_cpu_ms = 0.0, 0.0
        self.last_cpu_ns, self.next_rng_seed = None, None

    def _put_inputs(self, inputs):
        return {}, 0

    def _fds(self):
        return []

    def _take(self, reply, copying=None):
        return "outputs"

    def _ask(self, msg, fds=(), clock=None):
        if clock is not None:
            clock.append(self.wall_ms)
        return dict(self.reply) if msg["op"] == "time" else {"ok": True}


def _timed(reply: dict, wall_ms: float, calls: int = 12) -> _Stub:
    remote = _Stub(reply, wall_ms)
    for _ in range(calls):
        assert remote.timed_call([]) == (reply["ms"], "outputs")
    return remote


def test_a_lead_in_is_taken_out_of_the_bracket():
    # a 0.2 ms kernel timed on the device behind a 0.55 ms lead-in: the judge's bracket is 0.85 ms
    honest = {"ms": 0.2, "lead_in_ms": 0.55, "clean": True, "left_running": 0}
    check, warning = _timed(honest, 0.85).timing_check(strict=True)
    assert check["passed"] and not warning
    assert "lead-in, up to 0.55 ms; 12 of 12 calls launched ahead" in check["detail"], check["detail"]
    # the same report without the lead-in stated: 0.2 ms against a 0.8 ms bracket is far below it
    with pytest.raises(RemoteFailure, match="far below the judge's own clock"):
        _timed({"ms": 0.2}, 0.85).timing_check(strict=True)


def test_a_lead_in_the_bracket_cannot_hold_is_refused():
    with pytest.raises(RemoteFailure, match="longer than the 0.85 ms the judge measured"):
        _timed({"ms": 0.2, "lead_in_ms": 0.7}, 0.85)
    for bad in (-0.1, 9.0, "0.5", True, None):
        with pytest.raises(RemoteFailure, match="impossible timer lead-in"):
            _timed({"ms": 0.2, "lead_in_ms": bad}, 20.0)


def test_a_forged_report_fails_with_a_lead_in_too():
    # a 2 ms call reported as 0.02 ms behind an honest 0.55 ms lead-in
    with pytest.raises(RemoteFailure, match="far below the judge's own clock"):
        _timed({"ms": 0.02, "lead_in_ms": 0.55}, 2.8).timing_check(strict=True)
    check, warning = _timed({"ms": 0.02}, 2.8).timing_check(strict=False)  # a CPU box: a warning only
    assert check["passed"] and "could not confirm" in warning


def test_work_left_running_on_a_side_stream_is_a_warning():
    reply = {"ms": 2.1, "lead_in_ms": 0.55, "clean": True, "left_running": 1}
    check, warning = _timed(reply, 2.9, calls=5).timing_check(strict=True)
    assert check["passed"] and "5 of 5 timed calls left work running on another stream" in warning, warning


def test_the_judges_own_timer_overhead_is_taken_out_of_the_bracket():
    """Seen on an H200: the example's 0.045 ms kernel, timed behind a 0.5 ms lead-in, in a 1.13 ms bracket (the
    timer's barrier, questions and synchronizations, in a process woken for the request): rejected as "far below
    the judge's clock" until the judge's own timer's overhead (0.2 ms there) came out of the bracket."""
    honest = {"ms": 0.045, "lead_in_ms": 0.5, "clean": True, "left_running": 0}
    with pytest.raises(RemoteFailure, match="far below the judge's own clock"):
        _timed(honest, 1.13).timing_check(strict=True)
    fair = _timed(honest, 1.13)
    fair.timer_overhead_ms = 0.2  # as the judge sets it from its own timer
    check, _ = fair.timing_check(strict=True)
    assert check["passed"] and "spends at least 0.2 ms around a call" in check["detail"], check["detail"]
    # a forged report of a 2 ms call still fails: the overhead is the judge's measurement, not the candidate's
    forged = _timed({"ms": 0.05, "lead_in_ms": 0.5}, 3.1)
    forged.timer_overhead_ms = 0.2
    with pytest.raises(RemoteFailure, match="far below the judge's own clock"):
        forged.timing_check(strict=True)


class _Watch:
    """The caller's CPU readings of the candidate's process, as `CpuWatch` gives them to `timed_call`: nothing ran
    between requests, a fetch was all copy."""

    idle_ns = 0
    judge_copy_ns = 0

    def fetch_excess(self, fetch_ns, copy_ns):
        return 0

    def copying(self):
        import contextlib

        return contextlib.nullcontext()


class _Probed(_Stub):
    """A stub whose timed request used `time_cpu_ms` of CPU (the caller's reading)."""

    def __init__(self, reply: dict, wall_ms: float, time_cpu_ms: float):
        super().__init__(reply, wall_ms)
        self.cpu, self.time_cpu_ns = _Watch(), int(time_cpu_ms * 1e6)

    def _ask(self, msg, fds=(), clock=None):
        self.last_cpu_ns = self.time_cpu_ns if msg["op"] == "time" else 0
        return super()._ask(msg, fds, clock)


def test_the_cpu_floor_leaves_out_the_timers_own_cpu():
    """Seen on an H200: the example's 0.045 ms kernel, its timed request using ~0.8 ms of CPU, nearly all of it the
    GPU timer's own stream barrier and questions: over 16 cores a 0.05 ms floor, above the kernel's time, and the
    verdict took the floor. The CPU the judge's own timer uses around a call comes out first."""
    honest = {"ms": 0.045, "lead_in_ms": 0.5, "clean": True, "left_running": 0}
    floored = _Probed(honest, 1.0, time_cpu_ms=0.8)
    assert floored.timed_call([])[0] == pytest.approx(0.8 / 16)
    fair = _Probed(honest, 1.0, time_cpu_ms=0.8)
    fair.timer_cpu_ms = 0.75
    assert fair.timed_call([])[0] == pytest.approx(0.045)
    # a call that really used CPU time still gets its floor: 16 ms of CPU is 1 ms over 16 cores
    busy = _Probed(honest, 1.0, time_cpu_ms=16.75)
    busy.timer_cpu_ms = 0.75
    assert busy.timed_call([])[0] == pytest.approx(1.0)
