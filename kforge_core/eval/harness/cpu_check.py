"""The judge's check for work a candidate's process does outside its calls (deferred work), from the caller's CPU
probe (`kforge_core.eval.cpu_probe`).

The attack: a forward that returns at once and does the work later -- in a thread, or in a signal handler that fires
after the call returned -- so the timed call looks fast (97x faked, shared/EVAL_PITFALLS.md); the outputs are ready
by the time they are fetched, or the work is pointless and only steals the cores while the judge times eager. The
judge cannot see that process's CPU time; the caller can, and answers a reading whenever the judge asks. During the
timing phase the judge takes a reading right before and right after every request it sends the candidate's process
(outside its own clock's bracket), so the candidate's CPU time splits into:

- *inside its calls*: `time` (the timed call) and `call` (warm-ups): the kernel's work, any number of threads
  (an OpenMP kernel on 16 cores uses 16x the wall time; nothing here bounds it);
- *delivering a timed call's outputs* (`fetch`): honest work is copying the outputs and inputs into the arena (the
  guard check between calls is a request of its own, after it); the judge reads the same bytes back and measures
  its own CPU time for that, so the allowance is a multiple of the judge's own copy plus a fixed cost per request;
- *between requests* (idle): nothing runs in an honest candidate's process while the judge waits for nothing from
  it (times eager, compares, makes inputs); OpenMP pools sleep at once under `OMP_WAIT_POLICY=PASSIVE`, which every
  child gets unless the caller sets otherwise; with any other policy the pools spin after each call by design, and
  idle time is not judged (the check says so);
- preparing inputs and flushing the cache (`prep`), pings, findings: not judged (work there can neither make an
  output nor overlap anyone's timed call).

Deferred work is the CPU time of `fetch` beyond its allowance plus idle CPU time beyond its allowance. A candidate
is rejected when that exceeds both an absolute floor and a share of the CPU time inside its timed calls: an honest kernel's
deferred time is about zero whatever its threads do inside the call, while a forward that moved its work out of the
call shows nearly all of it outside.
"""

from __future__ import annotations

import os
import socket
import time
from collections import Counter

from ..cpu_probe import read_probe

# Allowances (CPU time of the candidate's process the judge accepts outside its calls). Measured on the 2-core box
# (CPU example, swish_small; guards on and off): an honest fetch took 1.1-1.7x the judge's own copy of the same
# bytes, about 0.1 ms of it fixed; an honest process used about 4 µs of CPU per window between requests.
FETCH_COPY_FACTOR = 2  # x the judge's own CPU time reading the same bytes back (one copy each, page faults)
FETCH_FIXED_NS = 300_000  # per fetch: the request's channel, JSON and launch records
IDLE_FIXED_NS = 50_000  # per window between two requests: returning to the channel, a pool going to sleep
# Rejected when deferred work exceeds both of these:
DEFERRED_MIN_NS = 2_000_000
DEFERRED_SHARE = 0.5  # of the CPU time inside its timed calls


class CpuWatch:
    def __init__(self, fd: int):
        self.sock = socket.socket(fileno=fd)
        self.active = False
        self.cpu: Counter = Counter()  # ns of the candidate's process per request kind
        self.count: Counter = Counter()
        self.judge_copy_ns = 0  # the judge's own CPU time reading fetched tensors out of the arena
        self.idle_ns = 0
        self.windows = 0
        self._last: int | None = None
        self.unreadable: str | None = None

    def _read(self) -> int | None:
        value = read_probe(self.sock)
        if value is None and self.unreadable is None:
            self.unreadable = "the caller could not read the candidate's process's CPU time"
        return value

    def start(self) -> None:
        self.active = True
        self._last = self._read()

    def stop(self) -> None:
        if not self.active:
            return
        end = self._read()
        if end is not None and self._last is not None:
            self.idle_ns += end - self._last
            self.windows += 1
        self.active = False

    def before(self) -> int | None:
        """A reading right before a request: closes the idle window since the last reply."""
        if not self.active:
            return None
        now = self._read()
        if now is not None and self._last is not None:
            self.idle_ns += now - self._last
            self.windows += 1
        return now

    def after(self, op: str, before: int | None) -> int | None:
        """A reading right after the reply: the request's CPU time (ns), or None."""
        if not self.active:
            return None
        now = self._read()
        self._last = now
        if now is None or before is None:
            return None
        self.cpu[op] += now - before
        self.count[op] += 1
        return now - before

    def fetch_excess(self, fetch_ns: int | None, copy_ns: int) -> int:
        """A fetch's CPU time beyond its allowance (the judge's own copy of the same bytes took `copy_ns`)."""
        if fetch_ns is None:
            return 0
        return max(0, fetch_ns - (FETCH_COPY_FACTOR * copy_ns + FETCH_FIXED_NS))

    def copying(self):
        """Context: the judge's own CPU time for reading a fetch's tensors (the allowance's yardstick)."""
        return _Copying(self)

    def close(self) -> None:
        self.sock.close()

    # ------------------------------------------------------------------ the verdict's part

    def judge(self) -> tuple[dict, str]:
        """(a check for the verdict, a rejection reason or "")."""
        name = "CPU time outside calls"
        if self.unreadable:
            return {"name": name, "passed": True, "detail": f"not checked: {self.unreadable}"}, ""
        inside = self.cpu["time"] + self.cpu["call"]
        timed = self.cpu["time"]
        fetch_allow = FETCH_COPY_FACTOR * self.judge_copy_ns + self.count["fetch"] * FETCH_FIXED_NS
        fetch_over = max(0, self.cpu["fetch"] - fetch_allow)
        passive = os.environ.get("OMP_WAIT_POLICY", "").strip().lower() == "passive"
        idle_allow = self.windows * IDLE_FIXED_NS
        idle_over = max(0, self.idle_ns - idle_allow) if passive else 0
        deferred = fetch_over + idle_over
        limit = max(DEFERRED_MIN_NS, DEFERRED_SHARE * timed)
        detail = (f"the caller read the candidate's process's CPU time around each request: {_ms(inside)} inside "
                  f"its calls ({_ms(timed)} in {self.count['time']} timed calls, the rest in "
                  f"{self.count['call']} warm-ups), {_ms(self.cpu['fetch'])} "
                  f"delivering timed outputs (allowed {_ms(fetch_allow)}), {_ms(self.idle_ns)} between requests "
                  + (f"(allowed {_ms(idle_allow)})" if passive else
                     "(not judged: OMP_WAIT_POLICY is not PASSIVE, so idle OpenMP pools may spin)")
                  + f"; work after its calls returned: {_ms(deferred)}, limit {_ms(limit)}")
        if deferred > limit:
            return ({"name": name, "passed": False, "detail": detail},
                    f"ModelNew's process kept working after its calls returned ({detail}): work deferred past the "
                    f"timer (a thread or a signal handler finishing the call later) [rule no-deferred-work]")
        return {"name": name, "passed": True, "detail": detail}, ""


class _Copying:
    def __init__(self, watch: CpuWatch):
        self.watch = watch

    def __enter__(self):
        self.t0 = time.process_time_ns()  # torch's copies may use the intra-op pool

    def __exit__(self, *exc):
        self.watch.judge_copy_ns += time.process_time_ns() - self.t0


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3g} ms"
