"""Roofline facts for a problem: bytes moved at least once, FLOPs, and the floor time at the device's measured
ceilings. A candidate faster than the floor is a measurement bug until proven otherwise.

Ceilings come from `kforge_core.ceilings` (measured once per device, cached); unknown stays unknown.
"""

from __future__ import annotations

from .ceilings import for_platform


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
           "pct_of_roofline": (100 * floor_ms / candidate_ms) if floor_ms and candidate_ms else None}
    if floor_ms and candidate_ms < 0.5 * floor_ms:
        out["suspicious"] = (f"candidate ({candidate_ms:.3g} ms) beats the hardware floor ({floor_ms:.3g} ms at the "
                             f"measured ceilings) by over 2x: treat this speedup as a measurement bug until proven")
    return out
