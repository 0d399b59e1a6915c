"""GPU checks of the CUDA timer (`platforms.cuda._timing.DeviceClockTimer`, issue 22): it times the call's work on the
device, whatever the calling process did before (idle, slow to launch), and work on side streams stays inside the
time however it is placed: started during the timer's lead-in, left running after the call returned, after a
call that waits for the device itself. Skipped without an NVIDIA GPU; run with scripts/gpu_check.sh."""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from test_gpu_eval import _save

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs an NVIDIA GPU (run scripts/gpu_check.sh on a GPU machine)")]


@pytest.fixture
def timer():
    """A fresh timer each test: its lead-in adapts to the calls it times."""
    from kforge_core.platform import get_platform
    from platforms.cuda._timing import DeviceClockTimer

    platform = get_platform("cuda", require_available=True)
    platform.prepare_child()
    t = platform.make_timer()
    assert isinstance(t, DeviceClockTimer), type(t)
    return t


def _sleep_ms(timer, ms: float) -> int:
    return int(ms * 1000 * timer._cycles_per_us)


def _host_work_then_kernel(seconds: float, cycles: int):
    """A call that spins on the host for `seconds` before it launches its one kernel (Python around a launch)."""
    def call():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        torch.cuda._sleep(cycles)

    return call


def _median(timer, fn, n: int = 9) -> float:
    return statistics.median(timer.time_ms(fn) for _ in range(n))


def test_the_same_kernel_times_the_same_after_the_caller_idled(timer):
    """The candidate's process waits idle before every timed call; eager's never does. The time is the device's."""
    cycles = _sleep_ms(timer, 0.2)
    x = torch.randn(1 << 22, device="cuda")

    def call():
        torch.cuda._sleep(cycles)
        x.mul_(1.0)

    busy = _median(timer, call, 21)
    idle = []
    for _ in range(21):
        time.sleep(0.03)
        idle.append(timer.time_ms(call))
    _save("device_timer_idle", {"busy_ms": busy, "after_30ms_idle_ms": statistics.median(idle),
                                "lead_in_us": timer.lead_in_us})
    assert abs(statistics.median(idle) - busy) < 0.1 * busy, (busy, idle)


def test_side_stream_work_during_the_lead_in_is_timed(timer):
    """Work put on a pool stream that does not wait for the current one would run while the timer's lead-in
    holds the current stream, before the start event: every pool stream waits for the start event."""
    cycles = _sleep_ms(timer, 2.0)
    side = torch.cuda.Stream()

    def cheat():
        with torch.cuda.stream(side):  # no wait on the current stream: free to start at once
            torch.cuda._sleep(cycles)
        torch.cuda.current_stream().wait_stream(side)

    ms = _median(timer, cheat, 5)
    _save("device_timer_lead_in_side_stream", {"ms": ms, "last": timer.last})
    assert ms > 1.5, ms


def test_side_stream_work_never_joined_is_timed(timer):
    """Work left running on a side stream when the call returns finishes after the end event: it is timed on the
    host until the device is idle."""
    cycles = _sleep_ms(timer, 2.0)
    side = torch.cuda.Stream()

    def lazy():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)

    ms = _median(timer, lazy, 5)
    _save("device_timer_unjoined_side_stream", {"ms": ms, "last": timer.last})
    assert timer.last["clean"] and timer.last["left_running"] == 1 and timer.last["tail_ms"] > 1.0, timer.last
    assert ms > 1.5 and timer.unjoined == 5, (ms, timer.unjoined)


def test_no_tail_is_added_to_a_call_that_joins_its_streams(timer):
    """The host-timed tail is for work left running; an honest call's tail is the synchronize's own jitter, which is
    not added."""
    cycles = _sleep_ms(timer, 0.2)
    tails = []
    for _ in range(30):
        timer.time_ms(lambda: torch.cuda._sleep(cycles))
        tails.append(timer.last["tail_ms"])
    _save("device_timer_honest_tails", {"tails": tails})
    assert not any(tails) and timer.unjoined == 0, tails


def test_side_stream_work_after_a_call_that_waited_for_the_device_is_timed(timer):
    """A call that synchronizes inside is never launched ahead of the device ("not clean"): what it leaves on a side
    stream is timed on the host until the device is idle."""
    cycles = _sleep_ms(timer, 2.0)
    side = torch.cuda.Stream()

    def sync_then_lazy():
        torch.cuda.current_stream().synchronize()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)

    ms = _median(timer, sync_then_lazy, 5)
    _save("device_timer_sync_then_unjoined", {"ms": ms, "last": timer.last})
    assert not timer.last["clean"], timer.last
    assert ms > 1.5, ms


def test_a_call_that_always_waits_for_the_device_ends_the_lead_in_growth(timer):
    """Doubling the lead-in cannot make such a call clean: after a few calls at the longest one, the timer goes back
    to the first lead-in (each call would otherwise wait 4 ms for nothing) and the times stay right."""
    cycles = _sleep_ms(timer, 0.3)
    first = timer.lead_in_us
    x = torch.ones(1, device="cuda")

    def item_then_kernel():
        x.item()
        torch.cuda._sleep(cycles)

    times = [timer.time_ms(item_then_kernel) for _ in range(12)]
    _save("device_timer_host_bound", {"times": times, "lead_in_us": timer.lead_in_us, "first": first})
    assert timer.lead_in_us == first and timer._host_bound
    assert 0.25 < statistics.median(times[-4:]) < 1.0, times


def test_host_launch_latency_before_the_first_kernel_is_not_the_kernel(timer):
    """Input-independent host work before the first launch (Python around a custom kernel) is hidden by the
    lead-in up to its length; the kernel's own time is what is measured."""
    cycles = _sleep_ms(timer, 0.3)
    plain = _median(timer, lambda: torch.cuda._sleep(cycles))

    delayed = _median(timer, _host_work_then_kernel(0.05e-3, cycles))
    _save("device_timer_host_latency", {"plain_ms": plain, "with_50us_host_ms": delayed})
    assert abs(delayed - plain) < 0.03 + 0.05 * plain, (plain, delayed)


def test_a_slow_launcher_gets_a_longer_lead_in(timer):
    """1.5 ms of host work before the first launch, longer than the first lead-in: the first calls are not clean
    (timed with the latency in them), the lead-in doubles until the call is launched ahead, and from then on the
    kernel's own time is measured."""
    cycles = _sleep_ms(timer, 0.3)
    plain = _median(timer, lambda: torch.cuda._sleep(cycles))

    slow_host = _host_work_then_kernel(1.5e-3, cycles)
    times = [timer.time_ms(slow_host) for _ in range(12)]
    _save("device_timer_slow_launcher", {"plain_ms": plain, "times": times, "lead_in_us": timer.lead_in_us,
                                         "not_clean": timer.not_clean})
    assert times[0] > plain + 0.5, times  # the first call's latency is in its time
    assert timer.lead_in_us >= 1500 and timer.last["clean"], (timer.lead_in_us, timer.last)
    assert abs(statistics.median(times[-5:]) - plain) < 0.03 + 0.05 * plain, (plain, times)


def test_inputs_read_on_the_host_wait_for_the_start(timer):
    """A copy of device data to the host (to compute there, hidden in the lead-in) waits on the current stream
    behind the lead-in: the host work after it is inside the time."""
    x = torch.randn(1 << 16, device="cuda")

    def on_host():
        y = x.cpu()
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:
            pass
        x.copy_(y)

    ms = _median(timer, on_host, 5)
    _save("device_timer_host_compute", {"ms": ms})
    assert ms > 0.9, ms
