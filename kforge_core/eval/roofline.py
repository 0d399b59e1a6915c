"""Roofline facts for a problem: bytes moved at least once, FLOPs, and the floor time at the device's measured
ceilings. A candidate faster than the floor is a measurement bug until proven otherwise.

Two shares of the floor: `pct_of_roofline` from the candidate's timed call (wall clock: host launch work and the
final synchronize included, what a caller waits), and `pct_of_roofline_device` from the profiler's kernel time per
forward, the same kind of time the ceilings were measured in (CUDA events around a device copy). Kernel bandwidth
is the second; the first is what the speedups use.

Ceilings come from `kforge_core.eval.ceilings` (measured once per device, cached); unknown stays unknown.
"""

from __future__ import annotations

from .ceilings import for_platform, label

# Below this share of the floor a time is a measurement bug (or work hidden from the timer/profiler), not a fast kernel.
_FLOOR_SHARE = 0.5


def _low_precision(tensors) -> bool:
    import torch

    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16) for t in tensors)


def count_flops(model, inputs) -> int | None:
    import torch

    try:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(*inputs)
        return int(counter.get_total_flops())
    except Exception:  # noqa: BLE001 - FLOP counting is best effort; unknown stays unknown
        return None


def roofline(ref_model, inputs, candidate_ms: float, platform) -> dict:
    import torch

    from .harness.loading import tensor_bytes

    with torch.no_grad():
        outputs = ref_model(*inputs)
    params = sum(p.numel() * p.element_size() for p in ref_model.parameters())
    nbytes = tensor_bytes(list(inputs)) + tensor_bytes(outputs) + params
    flops = count_flops(ref_model, inputs)
    ceil = for_platform(platform)
    bw = ceil.get("bandwidth_gbs")
    peak = ceil.get("fp32_tflops")
    if ceil.get("bf16_tflops") and _low_precision(list(inputs) + list(ref_model.parameters())):
        peak = ceil["bf16_tflops"]  # half-precision matmuls run on tensor cores: the fp32 peak would be no floor
    t_mem = nbytes / (bw * 1e9) * 1e3 if bw else None
    t_flop = flops / (peak * 1e12) * 1e3 if (peak and flops) else None
    floors = [t for t in (t_mem, t_flop) if t]
    floor_ms = max(floors) if floors else None
    out = {"bytes": nbytes, "flops": flops, "bandwidth_gbs": bw, "fp32_tflops": peak, "memory_floor_ms": t_mem,
           "compute_floor_ms": t_flop, "floor_ms": floor_ms,
           "bound": None if not floors else ("memory" if (t_mem or 0) >= (t_flop or 0) else "compute"),
           "pct_of_roofline": (100 * floor_ms / candidate_ms) if floor_ms and candidate_ms else None,
           "ceilings_measured_at": ceil.get("measured_at"), "ceilings_trusted": ceil.get("trusted"),
           "ceilings_label": label(ceil) if ceil else None}
    if floor_ms and ceil.get("trusted") is False:
        # a ceiling measured under load is too low: the floor too high, "% of floor" too high, and a fast kernel
        # would look faster than the hardware; no such claim is made on it
        out["ceilings_note"] = f"% of floor from {label(ceil)}: overstated; re-measure when the machine is quiet"
    elif floor_ms and candidate_ms < _FLOOR_SHARE * floor_ms:
        out["suspicious"] = (f"candidate ({candidate_ms:.3g} ms) beats the hardware floor ({floor_ms:.3g} ms at the "
                             f"measured ceilings) by over 2x: treat this speedup as a measurement bug until proven")
    return out



def with_device_time(roof: dict, device_ms: float | None, cache_bytes: int | None) -> dict:
    """The roofline with the profiler's device time per forward added, and its share of the floor.

    The profiler runs the same inputs back to back, so a problem that fits in the device's cache would be timed
    warm: its share is left out (with the reason) unless it moves at least twice the cache's bytes.
    """
    out = dict(roof)
    floor = roof.get("floor_ms")
    if not device_ms or device_ms <= 0 or not floor:
        return out
    out["device_ms"] = device_ms
    if cache_bytes and (roof.get("bytes") or 0) < 2 * cache_bytes:
        out["device_note"] = (f"no device-time share: the problem moves {roof.get('bytes') or 0:,} bytes, under twice "
                              f"the device cache ({cache_bytes:,} bytes), and the profiler runs it warm")
    elif device_ms < _FLOOR_SHARE * floor:
        out["device_note"] = (f"no device-time share: the profiled kernels ({device_ms:.3g} ms per forward) beat the "
                              f"floor ({floor:.3g} ms) by over 2x, so the profile missed work (side streams?)")
    else:
        out["pct_of_roofline_device"] = 100 * floor / device_ms
    return out
