"""A child that starts a grandchild (`sleep`) and then hangs, for the timeout test: run_child must kill the whole
process group, so the grandchild dies too. The grandchild's pid is written to request["pid_file"]."""

import json
import subprocess
import sys
import time


def main() -> None:
    request = json.loads(sys.stdin.read())
    grandchild = subprocess.Popen(["sleep", "300"])
    with open(request["pid_file"], "w") as f:
        f.write(str(grandchild.pid))
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
