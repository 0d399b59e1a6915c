"""Work deferred to a thread that starts it 1 ms after the call returned (needs the static rules and guards disarmed): see `_defer`.
In one process: `correct`, timed at one row's cost. With the judge: rejected, the caller's CPU probe having seen the
candidate's process work after its timed calls returned."""

import threading
import time

from tests.candidates.hostile._defer import DeferredModel, join_before_reading, pending

join_before_reading()


class ModelNew(DeferredModel):
    def defer(self, work) -> None:
        def later() -> None:
            time.sleep(0.001)  # let the call return and its reply leave first: all of the work is past the timer
            work()

        t = threading.Thread(target=later)
        t.start()
        pending.append(t.join)
