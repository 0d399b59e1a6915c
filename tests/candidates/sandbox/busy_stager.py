"""A busy evaluation child for the cancel test: it reports a stage through the progress channel, starts a
grandchild (`sleep`, pid written to request["pid_file"]), then spins on the CPU forever. A cancel must kill the
whole process group, grandchild included."""

import json
import os
import subprocess
import sys

from kforge_core.eval.harness import progress


def main() -> None:
    request = json.loads(sys.stdin.read())
    progress.open_channel(request)
    grandchild = subprocess.Popen(["sleep", "300"])
    with open(request["pid_file"], "w") as f:
        f.write(str(grandchild.pid))
    progress.stage("spinning", child=os.getpid())
    while True:
        pass


if __name__ == "__main__":
    main()
