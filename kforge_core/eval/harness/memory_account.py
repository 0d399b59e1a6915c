"""The candidate's process's own account of its memory per phase (worker.op_memory), as the verdict's
`memory.candidate_process` shows it. Candidate code runs in that process, so the account is a claim: only byte counts
of the judge's own phase names and fields are kept, the rest dropped and counted, the measure is named by the judge,
and nothing in it is used for a verdict (`remote.RemoteCandidate.memory_report` asks for it once the verdict is
decided)."""

from __future__ import annotations

import torch

# The phases the candidate's process keeps its memory peaks for: its own set-up (the problem and one reference call,
# before the judge's first request), then the judge's, named in the first request of each (`phase`; never a timed
# request or its fetch: remote.UNMARKED_OPS).
CANDIDATE_PHASES = ("setup", "load", "correctness", "timing", "profiling")
MEMORY_FIELDS = ("peak_bytes", "peak_reserved_bytes", "held_bytes", "held_reserved_bytes")
MAX_REPORTED_BYTES = 1 << 50  # 1 PiB: a count above it is not a measurement
MEMORY_REPORT_WAIT_S = 5.0  # the judge's wait for the account after the verdict is decided
REPORTED_BY = ("the candidate's process, as its own account: candidate code runs there and can change it, so it is "
               "shown for diagnosis only and never used for the verdict")


def _byte_count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_REPORTED_BYTES else None


def candidate_memory(raw, device) -> dict:
    """The candidate's process's memory account (worker.op_memory) as the verdict shows it: only the judge's own
    phase names and fields, each a byte count (a non-negative int below MAX_REPORTED_BYTES); anything else is
    dropped and counted. The measure is named by the judge (the same kind of device as its own), not taken."""
    cuda = torch.device(device).type == "cuda"
    out = {"reported_by": REPORTED_BY,
           "measure": ("torch.cuda.max_memory_allocated (peak_bytes) and max_memory_reserved (peak_reserved_bytes), "
                       "reset per phase; held_*: at the phase's end" if cuda else
                       "VmHWM (peak RSS) per phase, the shared arena's pages included once touched; held_bytes: RSS "
                       "at the phase's end")}
    if not isinstance(raw, dict):
        return {**out, "unavailable": "no account in the reply" if raw is None else "a malformed account (ignored)"}
    dropped = 0
    start = _byte_count(raw.get("start_bytes"))
    if start is not None:
        out["start_bytes"] = start
    elif "start_bytes" in raw:
        dropped += 1
    for name in MEMORY_FIELDS:
        entries = raw.get(name)
        if entries is None:
            continue
        if not isinstance(entries, dict):
            dropped += 1
            continue
        kept = {p: _byte_count(entries.get(p)) for p in CANDIDATE_PHASES if p in entries}
        dropped += sum(v is None for v in kept.values()) + sum(1 for k in entries if k not in CANDIDATE_PHASES)
        kept = {p: v for p, v in kept.items() if v is not None}
        if kept:
            out[name] = kept
    dropped += sum(1 for k in raw if k not in ("start_bytes", *MEMORY_FIELDS))
    if dropped:
        out["ignored"] = f"{min(dropped, 10 ** 6)} malformed or unknown entries ignored"
    return out
