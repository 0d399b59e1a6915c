"""How much memory an evaluation is allowed and how much it uses: the default limit, and the polled memory of a
child's session (the limit's check where RLIMIT_AS cannot be used)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def default_memory_limit_mb() -> int:
    """16 GiB, or 60 % of the host's memory where that is more: KernelBench's largest problems (6 GiB inputs and
    outputs, made on the host, held in the judge's shared arena and by the candidate's process) need more than 16 GiB
    of host memory, while a runaway candidate must still be stopped before the host runs out."""
    try:
        total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 20)
    except (ValueError, OSError):
        return 16384
    return int(max(16384, 0.6 * total_mb))


def session_memory_mb(pid: int, within_mb: float | None = None) -> float:
    """Memory of a process group leader and its descendants (Linux), in MiB; 0 where unknown. Each process counts
    its proportional share (Pss) of pages it shares with others, so the judge's shared arena, mapped by the judge
    and by the candidate's process, is not counted twice; resident pages (RSS) where Pss cannot be read.
    `within_mb`: the resident total alone when that is no more (an RSS sum bounds the Pss sum from above), so a
    session under its limit is checked without reading smaps_rollup, which walks every mapping (tens of ms for a
    process with a CUDA context, twice a second during the evaluation it supervises)."""
    procs: list[tuple[int, int]] = []
    try:
        out = subprocess.run(["ps", "-o", "pid=,rss=", "-s", str(pid)], capture_output=True, text=True, timeout=2)
        for line in out.stdout.splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
                procs.append((int(fields[0]), int(fields[1])))
    except (OSError, subprocess.SubprocessError):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0
    rss = sum(kb for _, kb in procs) / 1024
    if within_mb is not None and rss <= within_mb:
        return rss
    return sum(_pss_kb(p, kb) for p, kb in procs) / 1024


def _pss_kb(pid: int, rss_kb: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return rss_kb
