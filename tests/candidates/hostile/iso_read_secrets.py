"""Secrets (issue 20): the settings file's key and the caller's OPENAI_API_KEY. Reads the settings file (directly and
through a symlink it makes), the run store, files under HOME, the caller's /proc/<pid>/environ and every other
visible process's, and prints whatever it found, so it would reach the log and the verdict."""

import os
import sys

from tests.candidates.hostile._probe import attempt, read, run


def body(request):
    paths = request["paths"]
    found = {p: attempt(lambda p=p: read(p)) for p in paths}
    try:
        os.symlink(request["settings"], "settings_link")
        found["settings_link"] = attempt(lambda: read("settings_link"))
    except OSError as e:
        found["settings_link"] = {"ok": False, "error": str(e)}
    procs = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    found["environ"] = {str(pid): attempt(lambda pid=pid: read(f"/proc/{pid}/environ")) for pid in
                        {*procs, request["caller_pid"]} - {os.getpid()}}
    for what in found.values():
        print(what, flush=True)  # into the candidate's log, if it ever held a secret
        sys.stderr.write(f"{what}\n")
    return {"found": found, "procs": procs, "pid": os.getpid(), "uid": os.getuid()}


if __name__ == "__main__":
    run(body)
