"""The CUDA timer's decisions (`platforms.cuda._timing.DeviceClockTimer`) on a simulated device, so CI without a GPU
checks them: an honest call is timed exactly, a slow launcher gets a longer lead-in until it is measured clean, a
call that waits for the device inside ends the lead-in's growth, work left running on another stream is added,
and a stream that cannot be held fails the timing. The simulated device and host share a virtual clock (nothing here depends on
how busy the machine running the tests is). The same behaviour on a real GPU:
tests/gpu/test_gpu_device_timer.py."""

from __future__ import annotations

import time
import types

import pytest
import torch

from kforge_core.platform import TimingIntegrityError


class _Device:
    """A device and a host on one virtual clock (ms): every call into the fake driver takes 1 us of host time, a
    wait for the device moves the clock to when the device is done, a kernel is queued behind what is there."""

    def __init__(self):
        self.clock = 1000.0
        self.busy_until = 0.0  # the current stream's queued work ends then
        self.side_until = 0.0  # work on a side stream ends then

    def tick(self) -> float:
        self.clock += 0.001
        return self.clock

    def host_work(self, ms: float) -> None:
        self.clock += ms

    def enqueue(self, ms: float) -> None:
        self.busy_until = max(self.tick(), self.busy_until) + ms

    def synchronize(self) -> None:
        self.clock = max(self.tick(), self.busy_until, self.side_until)


class _Event:
    def __init__(self, enable_timing=False, blocking=False):
        self.t = None


class _Stream:
    def __init__(self, handle: int, side: bool = False):
        self.cuda_stream, self.side = handle, side


@pytest.fixture
def device(monkeypatch):
    dev = _Device()
    waits: list = []

    def record(ev, stream):
        ev.t = max(dev.tick(), dev.busy_until)

    def event_sync(ev):
        dev.clock = max(dev.tick(), ev.t)

    def wait(ev, stream):
        dev.tick()
        if getattr(dev, "refuse_wait", False):
            raise RuntimeError("operation not permitted when stream is capturing")
        waits.append(stream.cuda_stream)

    event_base = types.SimpleNamespace(record=record, elapsed_time=lambda a, b: b.t - a.t, synchronize=event_sync,
                                       query=lambda ev: ev.t is not None and dev.tick() >= ev.t, wait=wait)
    stream_base = types.SimpleNamespace(query=lambda s: not (s.side and dev.tick() < dev.side_until))
    monkeypatch.setattr(torch._C, "_CudaEventBase", event_base, raising=False)
    monkeypatch.setattr(torch._C, "_CudaStreamBase", stream_base, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_sleep", lambda cycles: dev.enqueue(cycles / 2e6), raising=False)  # 2 GHz
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(time, "perf_counter_ns", lambda: int(dev.tick() * 1e6))  # the timer's clock: virtual
    current = _Stream(0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: current)
    dev.waits = waits
    dev.streams = [_Stream(h, side=(h == 7)) for h in range(1, 130)] + [current]
    return dev


def _timer(dev):
    from platforms.cuda._timing import DeviceClockTimer

    return DeviceClockTimer(dev.synchronize, torch._C._CudaEventBase.query, dev.streams)


def _kernel(dev, ms: float):
    return lambda: dev.enqueue(ms)


def test_an_honest_call_is_timed_on_the_device(device):
    timer = _timer(device)
    assert timer.lead_in_us >= 200 and 0 <= timer.overhead_ms < 5 and timer.cpu_overhead_ms >= 0
    times = [timer.time_ms(_kernel(device, 0.3)) for _ in range(5)]
    assert times == pytest.approx([0.3] * 5, abs=1e-9), times
    assert timer.last["clean"] and timer.last["tail_ms"] == 0 and timer.last["left_running"] == 0
    assert timer.last["lead_in_ms"] == pytest.approx(timer.lead_in_us / 1000, rel=0.05)
    assert set(range(1, 130)) <= set(device.waits)  # every other stream held for the start


def test_a_slow_launcher_is_measured_clean_once_the_lead_in_covers_it(device):
    timer = _timer(device)
    first = timer.lead_in_us

    def slow():
        device.host_work(2.0)
        device.enqueue(0.3)

    times = [timer.time_ms(slow) for _ in range(10)]
    assert times[0] > 1.0 and not timer._host_bound, times  # its latency is in the first time
    assert timer.lead_in_us >= 2000 > first and timer.last["clean"]
    assert times[-3:] == pytest.approx([0.3] * 3, abs=1e-9), times


def test_a_call_that_waits_for_the_device_ends_the_growth(device):
    timer = _timer(device)
    first = timer.lead_in_us

    def waits():
        device.synchronize()
        device.enqueue(0.3)

    times = [timer.time_ms(waits) for _ in range(12)]
    assert timer._host_bound and timer.lead_in_us == first and timer.not_clean == 12
    assert all(t >= 0.3 for t in times), times


def test_work_left_running_on_a_side_stream_is_added(device):
    timer = _timer(device)

    def lazy():
        device.enqueue(0.05)
        device.side_until = device.busy_until + 2.0  # on stream 7 after the call's kernel, never joined back

    ms = timer.time_ms(lazy)
    assert timer.last["left_running"] == 1 and timer.unjoined == 1
    assert ms == pytest.approx(0.05 + 2.0, abs=0.02), timer.last


def test_a_stream_that_cannot_be_held_fails_the_timing(device):
    timer = _timer(device)
    device.refuse_wait = True
    with pytest.raises(TimingIntegrityError, match="could not be held"):
        timer.time_ms(_kernel(device, 0.1))


class _Pool:
    """torch's stream pool as `torch.cuda.Stream(priority=p)` hands it out: 32 streams per level, round robin,
    priorities clamped to the levels there are (or refused, as a torch may)."""

    def __init__(self, levels: int, refuse: bool):
        self.levels, self.refuse, self.next = levels, refuse, {}

    def stream(self, priority=0):
        level = -priority
        if level >= self.levels:
            if self.refuse:
                raise RuntimeError(f"priority {priority} out of range")
            level = self.levels - 1
        i = self.next.get(level, 0)
        self.next[level] = i + 1
        return _Stream(1000 + 100 * level + i % 32)


@pytest.mark.parametrize("refuse", [False, True])
def test_every_pool_stream_is_found(monkeypatch, refuse):
    from platforms.cuda._timing import pool_streams

    pool = _Pool(levels=3, refuse=refuse)
    monkeypatch.setattr(torch.cuda, "Stream", pool.stream)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda *a: _Stream(0))

    class _External(_Stream):
        def __init__(self, handle):
            super().__init__(handle)

        def query(self):
            return True

    monkeypatch.setattr(torch.cuda, "ExternalStream", _External)
    handles = [s.cuda_stream for s in pool_streams()]
    assert len(handles) == len(set(handles)) == 3 * 32 + 2
    assert handles[-2:] == [0, 2]  # the legacy and the per-thread default streams
