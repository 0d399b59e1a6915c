"""A child that starts a grandchild (`sleep`) in its process group and a daemon in a session of its own (`setsid`,
which leaves the process group), then hangs, for the timeout test: run_child must kill the whole group, and with
OS isolation the daemon too (it dies with the PID namespace), even when the child itself leaves the group and drops
its parent-death signal. Both run `sleep request["marker"]`, a duration no
other process uses, so the test can find them from outside (pids differ inside a PID namespace)."""

import json
import os
import subprocess
import sys
import time


def main() -> None:
    request = json.loads(sys.stdin.read())
    subprocess.Popen(["sleep", request["marker"]])
    subprocess.Popen(["sleep", request["marker"]], start_new_session=True)
    try:  # and itself out of the group the caller kills, without the parent-death signal that would end it
        os.setsid()
        import ctypes

        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG 0
    except OSError:
        pass  # already a session leader (a spawned child without isolation)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
