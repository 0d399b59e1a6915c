"""`python -m kforge_core.loop.worker --db PATH --run-id ID [--resume]`: execute one run, detached from whoever started
it (see `kforge_core.loop.launch_worker`). With `--manual evaluate|analyse --program FILE [--of N]`: one job of a
manual run (see `kforge_core.loop.manual`).

The run's config comes from the store; secrets come from this process's environment only (`OPENAI_API_KEY`, and
`KFORGE_RUN_BASE_URL` when the endpoint URL carries credentials the store must not keep). SIGTERM ends the run as
cancelled, with its record closed; SIGKILL leaves it "running" until `mark_interrupted_runs` notices, and it can
then be resumed with nothing lost but the iteration in progress.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import KForgeError
from .manual import MANUAL_JOBS, execute_manual, read_program
from .runs import config_for_worker, execute_run, sigterm_as_interrupt
from ..store import open_store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kforge_core.loop.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="run store (SQLite file)")
    parser.add_argument("--run-id", required=True, help="the run to execute")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run")
    parser.add_argument("--manual", choices=MANUAL_JOBS, help="one job of a manual run (the Workbench's)")
    parser.add_argument("--program", help="--manual: the file holding the program (deleted once read)")
    parser.add_argument("--of", type=int, help="--manual analyse: the version whose profile the analyst reads")
    args = parser.parse_args(argv)
    if args.manual and not args.program:
        parser.error("--manual needs --program")
    sigterm_as_interrupt()
    try:
        if args.manual:
            status = execute_manual(args.db, args.run_id, args.manual, read_program(args.program), args.of)
            print(f"run {args.run_id} ({args.manual}): {status}", file=sys.stderr)
            return 0
        with open_store(args.db) as store:
            store.mark_interrupted_runs()
            run = store.get_run(args.run_id)
            config = config_for_worker(run)
        # A queued run that waited too long for this worker was just marked interrupted: it starts by resuming.
        resume = args.resume or run["status"] != "queued"
        status = execute_run(args.db, args.run_id, config, resume=resume)
    except KForgeError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    print(f"run {args.run_id}: {status}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
