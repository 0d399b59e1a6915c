"""Shared by the `iso_*` hostile modules: each stands in for a candidate that got past every static rule and runs
arbitrary code in the evaluation child (the OS isolation is what must stop it). Speaks the child protocol: request
JSON on stdin, result framed by the nonce on stdout. Every attempt is recorded as data, never raised."""

import json
import sys


def attempt(fn):
    try:
        return {"ok": True, "value": fn()}
    except BaseException as e:  # noqa: BLE001 - a failed attack is the expected outcome
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read(1 << 16).decode(errors="replace")


def run(body) -> None:
    request = json.loads(sys.stdin.read())
    result = body(request)
    sys.stdout.write(f"<<{request['nonce']}>>{json.dumps(result)}<</{request['nonce']}>>")
    sys.stdout.flush()
