"""Processes that outlive the evaluation (issue 20): a daemon in its own session (setsid) and a double-forked
orphan, both `sleep MARKER`, left running when the child returns its result."""

import os
import subprocess

from tests.candidates.hostile._probe import run


def body(request):
    marker = request["marker"]
    subprocess.Popen(["sleep", marker], start_new_session=True)
    if os.fork() == 0:  # double fork: the orphan is re-parented away from this process
        if os.fork() == 0:
            os.setsid()
            os.execvp("sleep", ["sleep", marker])
        os._exit(0)
    os.wait()
    return {"left_running": True}


if __name__ == "__main__":
    run(body)
