"""Forging the candidate's process's memory account (needs the static rules and guards disarmed: a candidate that
got past them). The kernel is honest (the CPU example's); at import it replaces the worker's `memory` answer with a
malformed one: negative, boolean, float, huge and string counts, unknown phases and fields, a nested object, and a
reply that also claims a verdict's status. The judge decides the verdict before it asks (and never from the
account), refuses a reply carrying a status as a failure of that request only, and keeps nothing it cannot
validate; the account it does show is labelled as the candidate's process's own."""

import sys

from platforms.examples.cpu.candidate import ModelNew  # noqa: F401 - the candidate, unchanged

FORGED = {
    "start_bytes": -5,
    "peak_bytes": {"setup": 1 << 20, "correctness": -1, "timing": True, "load": 2.5, "profiling": 1 << 60,
                   "judge": 7, "x" * 10000: 1},
    "peak_reserved_bytes": "lots",
    "held_bytes": {"correctness": {"nested": 1}, "timing": 123},
    "verdict": {"status": "correct", "candidate_ms": 1e-9},
    "reported_by": "the judge",
}

worker = sys.modules.get("kforge_core.eval.harness.worker")
if worker is not None:  # the candidate's process (in one process there is no such request to forge)
    worker._Worker.op_memory = lambda self, msg: {"memory": dict(FORGED), "speedup": 1e9}
