"""Profiling on MPS: per-launch event timings of the candidate's Metal kernels, summarized in the
`kforge_core.profiling` shape.

torch.profiler sees only the CPU side of MPS (which aten ops were dispatched, not how long the GPU ran them), so the
adapter times every launch of a kernel built with `compile_metal` between two `torch.mps.event.Event`s while a
profile is taken; whatever the forward spends outside those kernels (PyTorch's own MPS ops, gaps between command
buffers, synchronization) is one "other" row. The same run emits os_signpost intervals
(`torch.mps.profiler.profile(mode="interval")`) that Xcode Instruments records, for a person who wants the GPU
timeline; screenshots of it can be attached for the analysis agent.
"""

from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass, field

CUSTOM_PREFIX = "kforge::"
OTHER_ROW = "other (PyTorch MPS ops, command-buffer gaps, synchronization)"
EVENT_NOTE = ("custom-kernel times come from a pair of torch.mps.event.Event(enable_timing=True) around each launch: "
              "host-observed completion times of MTLSharedEvent signals (microsecond resolution, including the "
              "command-buffer scheduling around the kernel), not GPU timestamps; each event commits the command "
              "buffer, so launches are not batched while profiling")
CPU_ONLY_NOTE = ("torch.profiler sees only CPU-side dispatch on MPS, so PyTorch's own ops are counted, not timed: "
                 "their GPU time is inside the 'other' row")
SIGNPOST_NOTE = ("os_signpost intervals were emitted during the profiled calls (torch.mps.profiler.profile, "
                 "mode='interval'): run the evaluation under Xcode Instruments (os_signpost + Metal System Trace) to "
                 "see them on the GPU timeline; screenshots of Instruments or of an Xcode GPU capture can be attached "
                 "for the analysis agent")


@dataclass
class LaunchRecorder:
    """Collects (kernel name, start event, end event) while active; the kernel wrappers call `launch`."""

    active: bool = False
    pending: list = field(default_factory=list)

    def launch(self, name: str, call):
        if not self.active:
            return call()
        import torch

        start, end = torch.mps.event.Event(enable_timing=True), torch.mps.event.Event(enable_timing=True)
        start.record()
        result = call()
        end.record()
        self.pending.append((name, start, end))
        return result

    def kernel_ms(self) -> dict[str, list[float]]:
        """Elapsed ms per launch, by kernel; call after a device synchronize."""
        out: dict[str, list[float]] = {}
        for name, start, end in self.pending:
            out.setdefault(name, []).append(float(start.elapsed_time(end)))
        return out


recorder = LaunchRecorder()


@contextlib.contextmanager
def recording():
    recorder.pending = []
    recorder.active = True
    try:
        yield recorder
    finally:
        recorder.active = False


def summarize_mps_profile(kernel_ms: dict[str, list[float]], forward_ms: list[float], trials: int, *, device: str,
                          clean_forward_ms: list[float] | None = None, torch_ops: dict[str, float] | None = None,
                          signposts: bool = True, top: int = 12) -> dict:
    """Build the profile summary from measured numbers.

    kernel_ms: per-launch milliseconds of each custom kernel over all `trials` forwards; forward_ms: one wall time
    per forward measured in the same run (events in place); clean_forward_ms: forwards without per-launch events;
    torch_ops: non-custom aten ops dispatched per forward (CPU-side counts).
    """
    trials = max(1, trials)
    rows = []
    for name, samples in kernel_ms.items():
        rows.append({"name": f"{CUSTOM_PREFIX}{name}", "calls_per_forward": len(samples) / trials,
                     "ms_per_forward": sum(samples) / trials, "custom": True})
    custom_ms = sum(r["ms_per_forward"] for r in rows)
    notes = []
    total = statistics.fmean(forward_ms) if forward_ms else 0.0
    if custom_ms > total:
        if forward_ms:
            notes.append(f"custom kernels' event times ({custom_ms:.4g} ms) exceed the measured forward "
                         f"({total:.4g} ms): event overhead or noise; shares use the kernels' sum as the total")
        total = custom_ms
    other_ms = total - custom_ms
    if other_ms > 0:
        ops_per_forward = sum(torch_ops.values()) if torch_ops else 0.0
        rows.append({"name": OTHER_ROW, "calls_per_forward": ops_per_forward, "ms_per_forward": other_ms,
                     "custom": False})
    denom = total or 1e-12
    for r in rows:
        r["share"] = r["ms_per_forward"] / denom
    rows.sort(key=lambda r: r["ms_per_forward"], reverse=True)
    other_share = other_ms / denom
    if other_share > 0.1 and rows:
        notes.append(f"{100 * other_share:.0f}% of the forward is outside the custom kernels (PyTorch ops, launch "
                     f"gaps, synchronization)")
    if torch_ops:
        listed = ", ".join(f"{k} x{v:g}" for k, v in sorted(torch_ops.items(), key=lambda kv: -kv[1])[:8])
        notes.append(f"non-custom PyTorch ops per forward: {listed}")
    if not kernel_ms:
        notes.append("no kernel built with compile_metal ran during the profiled calls")
    notes.append(EVENT_NOTE)
    notes.append(CPU_ONLY_NOTE)
    if signposts:
        notes.append(SIGNPOST_NOTE)
    out = {"tool": "MPS events per custom launch + os_signpost (torch.mps.profiler)", "device": device,
           "per_forward_ms": total, "kernels": rows[:top], "custom_share": custom_ms / denom,
           "launches_per_forward": sum(r["calls_per_forward"] for r in rows if r["custom"]), "notes": notes,
           "screenshots": "Xcode Instruments (Metal System Trace, os_signpost) or GPU capture screenshots accepted"}
    if clean_forward_ms:
        clean = statistics.median(clean_forward_ms)
        out["per_forward_ms_unprofiled"] = clean
        if total > clean * 1.2 and clean > 0:
            notes.insert(0, f"per-launch events slow the forward from {clean:.4g} ms to {total:.4g} ms; read "
                            f"shares, not absolute times")
    return out
