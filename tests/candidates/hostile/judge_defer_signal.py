"""Work deferred to a signal handler that fires after the call returned (needs the static rules and guards
disarmed): see `_defer`. The forward arms a 1 ms one-shot timer; its SIGALRM handler runs the rest of the kernel
in the main thread, wherever that thread is by then (the harness's own code, or waiting for the next request). In
one process: `correct`, timed at one row's cost. With the judge: rejected by the caller's CPU probe."""

import signal
import time

from tests.candidates.hostile._defer import DeferredModel, join_before_reading, pending

join_before_reading()


class ModelNew(DeferredModel):
    def defer(self, work) -> None:
        done = []

        def handler(signum, frame) -> None:
            if not done:
                work()
                done.append(True)

        def wait() -> None:
            while not done:
                time.sleep(0.0001)  # the handler runs here at the latest

        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.001)
        pending.append(wait)
