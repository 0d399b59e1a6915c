"""Stands in for hostile code in an evaluation child (run with `run_child(module="tests.candidates.sandbox.envdump")`):
reports the environment it was given and whether it can read its parent's /proc/<ppid>/environ, where the
caller's secrets live. Speaks the child protocol: request JSON on stdin, result framed by the nonce on stdout."""

import json
import os
import sys


def main() -> None:
    request = json.loads(sys.stdin.read())
    nonce = request["nonce"]
    result = {"environ": dict(os.environ), "ppid": os.getppid(), "nonce": nonce}
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            result["parent_environ"] = f.read().decode(errors="replace")
    except OSError as e:
        result["parent_environ_error"] = f"{type(e).__name__}: {e}"
    sys.stdout.write(f"<<{nonce}>>{json.dumps(result)}<</{nonce}>>")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
