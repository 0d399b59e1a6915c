"""Forging the candidate's time (needs the static rules and guards disarmed: a candidate that got past them). The
kernel is honest (the CPU example's); at import it finds every timer object in its process (gc) and gives it a clock
that advances 1 microsecond per reading, so each timed call reports 0.001 ms. In one process that is the verdict
(eager is timed by the same timer); with the judge, eager is timed in the judge's process (untouched), and the
reports fall far below the CPU time the caller read for the timed calls (spread over every core): rejected on every
target (on accelerators the judge's own brackets reject it too; docs/EVALUATOR.md)."""

import gc
import itertools

from platforms.examples.cpu.candidate import ModelNew  # noqa: F401 - the candidate, unchanged

for obj in gc.get_objects():
    if type(obj).__name__.endswith("Timer") and hasattr(obj, "_clock"):
        obj._clock = itertools.count(0, 1000).__next__
