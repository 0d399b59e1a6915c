"""Phase-aware time limits inside the evaluation child: a hung forward call becomes a `timeout` within seconds of
the hang, not at the whole-child limit (300 s by default, which the build keeps as its budget).

`faulthandler.dump_traceback_later(..., exit=True)` runs a watchdog thread in C: it fires even while a kernel holds
the GIL in native code (where no Python signal handler runs), writes "Timeout (h:mm:ss)!" and the stacks to stderr
and ends the process with status 1. The parent (`evaluator`) reads that as a timeout of the phase named below.
"""

from __future__ import annotations

import contextlib
import faulthandler
import sys

MARK = "KForge phase limit:"  # written to stderr (once per phase) before the watchdog can write "Timeout (...)!"
_announced: set[str] = set()


def call_limit_s(reference_s: float) -> float:
    """A forward call may take max(10 s, 50x the reference's forward)."""
    return max(10.0, 50.0 * reference_s)


def timeout_reason(log: str) -> str | None:
    """The verdict's reason when the watchdog ended the child (its "Timeout (...)!" after one of our marks)."""
    lines = log.splitlines()
    fired = next((i for i, line in enumerate(lines) if line.startswith("Timeout (") and line.endswith(")!")), None)
    if fired is None:
        return None
    mark = next((line for line in reversed(lines[:fired]) if line.startswith(MARK)), None)
    if mark is None:
        return None
    return (f"{mark[len(MARK):].strip()} and ran past it (a hung or far too slow forward call); the process was "
            f"stopped then, not at the whole evaluation's limit")


@contextlib.contextmanager
def limit(seconds: float, what: str):
    stream = sys.__stderr__
    if stream is None:  # no stderr to report on: the whole-child limit still applies
        yield
        return
    if what not in _announced:
        _announced.add(what)
        stream.write(f"{MARK} {what} may take {seconds:.3g} s\n")
        stream.flush()
    faulthandler.dump_traceback_later(seconds, exit=True, file=stream)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
