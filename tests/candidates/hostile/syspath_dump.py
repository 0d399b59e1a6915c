"""Stands in for code in an evaluation child (run with `run_child(module="tests.candidates.hostile.syspath_dump")`,
as the builtin tracer runs its own module): reports sys.path and the working directory, the candidate's private
directory, which must not be on sys.path (a module planted there would be found by any lazy import). Speaks the
child protocol: request JSON on stdin, result framed by the nonce on stdout."""

import json
import os
import sys


def main() -> None:
    request = json.loads(sys.stdin.read())
    nonce = request["nonce"]
    result = {"sys_path": sys.path, "cwd": os.getcwd(), "safe_path": bool(getattr(sys.flags, "safe_path", False)),
              "no_user_site": bool(sys.flags.no_user_site)}
    sys.stdout.write(f"<<{nonce}>>{json.dumps(result)}<</{nonce}>>")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
