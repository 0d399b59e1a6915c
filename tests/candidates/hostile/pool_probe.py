"""What an evaluation child can see of its caller (needs the static rules and guards disarmed: a candidate that got
past them). Correct output (the CPU example's kernel); when built it prints one `POOL-PROBE {json}` line with its
pid, the pids its /proc shows, its HOME and working directory, whether the caller's HOME file and settings are
readable, and which credential-like variables it holds. The warm-pool tests compare what a pre-started child and a
child forked on demand report."""

import json
import os

from platforms.examples.cpu.candidate import ModelNew as Honest  # the CPU example's kernel (launches, is right)


def _readable(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            f.read(16)
        return True
    except OSError:
        return False


def probe() -> dict:
    caller_home = os.environ.get("KFORGE_TEST_CALLER_HOME", "")
    return {"pid": os.getpid(), "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "home": os.environ.get("HOME"), "cwd": os.getcwd(),
            "caller_home_file": _readable(os.path.join(caller_home, "notes.txt")) if caller_home else None,
            "secret_vars": sorted(k for k in os.environ if "KEY" in k or "TOKEN" in k or "SECRET" in k),
            "uid": os.getuid()}


class ModelNew(Honest):
    def __init__(self, *args):
        super().__init__(*args)
        print("POOL-PROBE " + json.dumps(probe()), flush=True)
