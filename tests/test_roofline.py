"""The roofline's device-time share: the profiler's kernel time per forward against the floor, where it means
something (a problem larger than the cache, kernels not faster than the hardware allows)."""

from __future__ import annotations

import pytest

from kforge_core.eval.roofline import with_device_time

ROOF = {"bytes": 4 << 30, "floor_ms": 1.0, "bound": "memory", "pct_of_roofline": 80.0}
L2 = 50 << 20


def test_device_share_next_to_the_timed_one():
    out = with_device_time(ROOF, 1.1, L2)
    assert out["device_ms"] == 1.1 and out["pct_of_roofline_device"] == pytest.approx(100 / 1.1)
    assert out["pct_of_roofline"] == 80.0 and "device_note" not in out
    assert "device_ms" not in ROOF  # the verdict's own dict is not changed in place


def test_problem_that_fits_in_the_cache_gets_no_device_share():
    out = with_device_time(dict(ROOF, bytes=60 << 20), 0.9, L2)
    assert "pct_of_roofline_device" not in out and out["device_ms"] == 0.9
    assert "twice the device cache" in out["device_note"] and "62,914,560 bytes" in out["device_note"]


def test_kernels_faster_than_the_hardware_are_a_profile_that_missed_work():
    out = with_device_time(ROOF, 0.3, L2)
    assert "pct_of_roofline_device" not in out and "side streams" in out["device_note"]


@pytest.mark.parametrize("device_ms, roof", [(None, ROOF), (0.0, ROOF), (1.0, dict(ROOF, floor_ms=None))])
def test_nothing_added_without_a_device_time_or_a_floor(device_ms, roof):
    assert with_device_time(roof, device_ms, L2) == roof


def test_unknown_cache_size_still_gives_a_share():
    assert with_device_time(ROOF, 1.25, None)["pct_of_roofline_device"] == pytest.approx(80.0)
