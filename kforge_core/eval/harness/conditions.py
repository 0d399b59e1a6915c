"""The conditions each timed process ran under, stated in the verdict as one check: the judge (eager), the
candidate's process and the torch.compile baseline server each read their own (`read`), and `check` says whether
they agree. Three processes time three sides of one comparison; their times compare only when the thread pools and
the allocator policy are the same (child_setup.timing_environment gives every child the same ones, unless the caller
set them).

What the candidate's process reports is its claim (like its launch counts): a forged one changes this check's text,
never a time.
"""

from __future__ import annotations

import os

import torch

# the environment that decides how a process's timed calls run (child_setup.timing_environment)
SETTINGS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def read() -> dict:
    """This process's conditions: torch's intra-op thread count and the settings above ("" where unset)."""
    return {"threads": torch.get_num_threads(), **{name: os.environ.get(name, "") for name in SETTINGS}}


def _clean(reported) -> dict | None:
    """A report from another process, kept only in the shape `read` gives (short strings, a small integer)."""
    if not isinstance(reported, dict):
        return None
    threads = reported.get("threads")
    out = {"threads": threads if isinstance(threads, int) and not isinstance(threads, bool) and
           0 < threads < 1 << 16 else None}
    for name in SETTINGS:
        value = reported.get(name)
        out[name] = value[:40] if isinstance(value, str) else None
    return out


def _describe(c: dict) -> str:
    return f"{c['threads']} intra-op threads, " + ", ".join(f"{n}={c[n] or 'unset'}" for n in SETTINGS)


def check(sides: dict[str, object]) -> tuple[dict, str]:
    """{side's label: its conditions, or None where it gave none} -> (a check for the verdict, a warning or "")."""
    known = {label: c for label, c in ((label, _clean(r)) for label, r in sides.items()) if c is not None}
    missing = [label for label in sides if label not in known]
    distinct = {tuple(sorted(c.items())) for c in known.values()}
    if len(distinct) == 1:
        detail = f"every timed process ({', '.join(known)}): {_describe(next(iter(known.values())))}"
    else:
        detail = "; ".join(f"{label}: {_describe(c)}" for label, c in known.items())
    if missing:
        detail += f"; not reported: {', '.join(missing)}"
    warning = "" if len(distinct) <= 1 else (
        f"the timed processes ran under different settings ({detail}): their times are not measured alike")
    return {"name": "timing conditions", "passed": True, "detail": detail}, warning


def check_timed(candidate_label: str | None, candidate, compiled: bool, compiled_conditions) -> tuple[dict, str]:
    """The check for a candidate timed beside eager (this process, the judge) and, where `compiled`, the
    torch.compile baseline server: `candidate_label` names the process the candidate reported `candidate` from;
    None when it ran in this process."""
    mine = read()
    sides = {"candidate and eager (one process)": mine} if candidate_label is None else \
        {"eager (the judge)": mine, candidate_label: candidate}
    if compiled:
        sides["torch.compile baseline server"] = compiled_conditions
    return check(sides)
