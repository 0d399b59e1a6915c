"""Profile summaries: measured facts (time share, calls per forward), not raw counter dumps.

Shape (a JSON-safe dict, the contract for the analysis agent and the UI):
{"tool", "device", "per_forward_ms", "kernels": [{"name", "calls_per_forward", "ms_per_forward", "share",
"custom"}], "custom_share", "launches_per_forward", "notes": [...]}; platforms may add keys (e.g. "ncu").
"""

from __future__ import annotations

import re


def _is_custom(key: str, custom_names) -> bool:
    """`kforge::` ranges, or device kernels whose name contains one of the candidate's kernel names as a word."""
    if key.startswith("kforge::"):
        return True
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", key) for n in custom_names)


def summarize_torch_profile(prof, trials: int, tool: str, device: str, top: int = 12, custom_names=()) -> dict:
    events = prof.key_averages()
    use_device = device != "cpu"
    rows = []
    for ev in events:
        if use_device:
            self_us = getattr(ev, "self_device_time_total", None) or getattr(ev, "self_cuda_time_total", 0)
        else:
            self_us = ev.self_cpu_time_total
        custom = _is_custom(ev.key, custom_names)
        if custom and not use_device:
            self_us = ev.cpu_time_total  # a ctypes call has no child ops: its total is its own time
        if self_us <= 0:
            continue
        rows.append({"name": ev.key, "calls_per_forward": ev.count / trials, "ms_per_forward": self_us / 1e3 / trials,
                     "custom": custom})
    total = sum(r["ms_per_forward"] for r in rows) or 1e-12
    for r in rows:
        r["share"] = r["ms_per_forward"] / total
    rows.sort(key=lambda r: r["ms_per_forward"], reverse=True)
    custom_ms = sum(r["ms_per_forward"] for r in rows if r["custom"])
    notes = []
    non_custom = [r for r in rows[:5] if not r["custom"] and r["share"] > 0.1]
    for r in non_custom:
        notes.append(f"{r['name']} (not a custom kernel) takes {100 * r['share']:.0f}% of the time")
    return {"tool": tool, "device": device, "per_forward_ms": total, "kernels": rows[:top],
            "custom_share": custom_ms / total, "launches_per_forward": sum(r["calls_per_forward"] for r in rows
                                                                           if r["custom"]), "notes": notes}
