"""A fork bomb (issue 20: RLIMIT_NPROC): forks until refused, `request["attempts"]` at most; the forked processes
sleep and are killed by the PID namespace when the evaluation ends."""

import os
import time

from tests.candidates.hostile._probe import run


def body(request):
    forked, error = 0, None
    for _ in range(request["attempts"]):
        try:
            pid = os.fork()
        except OSError as e:
            error = f"{type(e).__name__}: {e}"
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        forked += 1
    return {"forked": forked, "error": error}


if __name__ == "__main__":
    run(body)
