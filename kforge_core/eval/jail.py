"""Launcher of spawned evaluation children: `python -m kforge_core.eval.jail PLAN_JSON -- CMD...` enters the namespaces
and the new root described by PLAN_JSON (`kforge_core.eval.isolation`), drops every capability, and execs CMD as the
namespace's PID 1. This process stays behind as the relay (outside the namespace, waiting; it runs no candidate
code). Standard library only, started with -S (no site-packages): it starts in milliseconds, before torch.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m kforge_core.eval.jail PLAN_JSON -- CMD...\n")
        os._exit(2)
    from .isolation import drop_privileges, enter

    enter(json.loads(argv[0]))  # returns in PID 1 only
    drop_privileges()
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
