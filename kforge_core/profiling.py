"""Profile summaries: measured facts (time share, calls per forward), not raw counter dumps.

Shape (a JSON-safe dict, the contract for the analysis agent and the UI):
{"tool", "device", "per_forward_ms", "kernels": [{"name", "calls_per_forward", "ms_per_forward", "share",
"custom", "op"?}], "custom_share", "launches_per_forward", "notes": [...]}; platforms may add keys (e.g. "ncu").

A device profile counts the device's own activity records (kernels, copies, sets) and nothing else: torch.profiler
also gives each PyTorch op that launched a kernel that kernel's time as its own "self device time" (and now and then
a profiler event, such as "Activity Buffer Request", a kernel's), so summing every row counted PyTorch's kernels
twice. A device row names its kernel, with the op that launched it as "op" where the profiler links them.
"""

from __future__ import annotations

import re


def _is_custom(key: str, custom_names) -> bool:
    """`kforge::` ranges, or device kernels whose name contains one of the candidate's kernel names as a word."""
    if key.startswith("kforge::"):
        return True
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", key) for n in custom_names)


def kernel_label(row: dict, width: int | None = None) -> str:
    """A profile row as people read it: the op that launched the kernel, then the kernel's name (clipped to `width`
    after an op)."""
    name = row.get("name") or ""
    return f"{row['op']} ({name[:width]})" if row.get("op") else name


def _device_side(ev) -> bool:
    """An activity record of the device itself (kernel, memcpy, memset), not a host op or runtime call."""
    kind = getattr(ev, "device_type", None)
    return kind is not None and str(kind).rsplit(".", 1)[-1] != "CPU"


def _kernel_owners(prof) -> dict[str, str]:
    """Kernel name -> the innermost op that launched it (e.g. `aten::add`), where the profiler links them."""
    owners: dict[str, str] = {}
    try:
        events = prof.events() or []
    except Exception:  # noqa: BLE001 - linkage is a nicety; the kernel's own name stays
        return owners
    for ev in events:
        if _device_side(ev) or ev.name.startswith(("cuda", "cuLaunch", "Activity Buffer")):
            continue
        for k in getattr(ev, "kernels", None) or []:
            owners.setdefault(k.name, ev.name)
    return owners


def summarize_torch_profile(prof, trials: int, tool: str, device: str, top: int = 12, custom_names=()) -> dict:
    events = prof.key_averages()
    use_device = device != "cpu"
    owners = _kernel_owners(prof) if use_device else {}
    rows = []
    for ev in events:
        if use_device:
            if not _device_side(ev):
                continue
            self_us = getattr(ev, "self_device_time_total", None) or getattr(ev, "self_cuda_time_total", 0)
        else:
            self_us = ev.self_cpu_time_total
        custom = _is_custom(ev.key, custom_names)
        if custom and not use_device:
            self_us = ev.cpu_time_total  # a ctypes call has no child ops: its total is its own time
        if self_us <= 0:
            continue
        row = {"name": ev.key, "calls_per_forward": ev.count / trials, "ms_per_forward": self_us / 1e3 / trials,
               "custom": custom}
        if ev.key in owners:
            row["op"] = owners[ev.key]
        rows.append(row)
    total = sum(r["ms_per_forward"] for r in rows) or 1e-12
    for r in rows:
        r["share"] = r["ms_per_forward"] / total
    rows.sort(key=lambda r: r["ms_per_forward"], reverse=True)
    custom_ms = sum(r["ms_per_forward"] for r in rows if r["custom"])
    notes = []
    non_custom = [r for r in rows[:5] if not r["custom"] and r["share"] > 0.1]
    for r in non_custom:
        notes.append(f"{kernel_label(r, 80)} (not a custom kernel) takes {100 * r['share']:.0f}% of the time")
    return {"tool": tool, "device": device, "per_forward_ms": total, "kernels": rows[:top],
            "custom_share": custom_ms / total, "launches_per_forward": sum(r["calls_per_forward"] for r in rows
                                                                           if r["custom"]), "notes": notes}
