"""A busy evaluation child for the cancel test: it reports a stage through the progress channel, starts a
grandchild (`sleep request["marker"]`, a duration no other process uses, so the test finds it from outside: pids
differ inside a PID namespace), then spins on the CPU forever. A cancel must kill the whole process group,
grandchild included."""

import json
import os
import subprocess
import sys

from kforge_core.eval.harness import progress


def main() -> None:
    request = json.loads(sys.stdin.read())
    progress.open_channel(request)
    subprocess.Popen(["sleep", request["marker"]])
    progress.stage("spinning", pid=os.getpid())
    while True:
        pass


if __name__ == "__main__":
    main()
