"""`runs`: list the recorded runs, show one, resume or cancel one."""

from __future__ import annotations

import argparse
import sys

from ..store import RUN_STATUSES, open_store, resolve_db_path
from ..formatting import fmt_ms, fmt_x
from .common import print_json
from .head_to_head_text import head_to_head_lines
from .synthesize_cmd import add_run_options, execute_and_report, overrides_from_args, prepare_agent


def register(sub) -> None:
    p = sub.add_parser("runs", help="list recorded runs; show, resume or cancel one",
                       description="Without a subcommand: list runs, newest first. Runs whose process died are "
                                   "marked interrupted first (they can be resumed).")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--status", choices=sorted(RUN_STATUSES), help="only runs with this status")
    p.add_argument("--limit", type=int, default=50, help="at most this many runs (default 50)")
    p.add_argument("--db", help="run store (default: $KFORGE_DB or ~/.local/share/kforge/runs.db)")
    p.set_defaults(handler=list_runs)
    actions = p.add_subparsers(dest="action", metavar="ACTION")

    show = actions.add_parser("show", help="one run with its iterations")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON (with the best code)")
    show.add_argument("--db", default=argparse.SUPPRESS, help="run store")
    show.set_defaults(handler=show_run)

    resume = actions.add_parser("resume", help="continue an interrupted (or failed / cancelled) run",
                                description="Continues the run from its last finished iteration, in this process "
                                            "(progress on stderr), or in a detached worker with --detach. Flags "
                                            "given here override the stored config (e.g. more iterations).")
    resume.add_argument("run_id")
    resume.add_argument("--detach", action="store_true", help="resume in a background worker and return at once")
    add_run_options(resume)
    resume.set_defaults(handler=resume_run_cmd)

    cancel = actions.add_parser("cancel", help="ask a running run to stop (its worker stops at the next step)")
    cancel.add_argument("run_id")
    cancel.add_argument("--db", default=argparse.SUPPRESS, help="run store")
    cancel.set_defaults(handler=cancel_run_cmd)


def _db(args: argparse.Namespace):
    return resolve_db_path(getattr(args, "db", None))


def list_runs(args: argparse.Namespace) -> int:
    with open_store(_db(args)) as store:
        store.mark_interrupted_runs()
        runs = store.list_runs(status=args.status, limit=args.limit)
    if args.json:
        print_json(runs)
        return 0
    if not runs:
        print("no runs" + (f" with status {args.status}" if args.status else ""))
        return 0
    for r in runs:
        best = f"best {fmt_ms(r['best_candidate_ms'])} {fmt_x(r['best_speedup_vs_eager'])} vs eager" \
            if r["best_iteration"] is not None else "no correct program"
        print(f"{r['id']}  {r['created_at'][:19].replace('T', ' ')}  {r['status']:<11} {r['problem_name']} on "
              f"{r['target']} ({written_by(r)})  {best}")
    return 0


def written_by(run: dict) -> str:
    """Who wrote the run's programs: a person for a manual run (the Workbench), else the agent and its model."""
    if run.get("kind") == "manual":
        return f"manual, by {run.get('author') or 'a person'}"
    return run["agent"] + (f", {run['model']}" if run.get("model") else "")


def show_run(args: argparse.Namespace) -> int:
    from ..loop import summarize_run

    with open_store(_db(args)) as store:
        store.mark_interrupted_runs()
        summary = summarize_run(store, args.run_id)
    if getattr(args, "json", False):
        print_json(summary)
        return 0
    print(f"run {summary['run_id']}: {summary['problem_name']} on {summary['target']} — {summary['status']}"
          + (f" ({summary['error']})" if summary["error"] else ""))
    print(f"  agent {summary['agent']}" + (f", model {summary['model']}" if summary["model"] else "")
          + f"; tokens {summary['tokens']['prompt']} prompt + {summary['tokens']['completion']} completion")
    for it in summary["iterations"]:
        status = it["status"] or "(unfinished)"
        timing = f"  {fmt_ms(it['candidate_ms'])}  {fmt_x(it['speedup_vs_eager'])} vs eager" \
            if it["candidate_ms"] is not None and status == "correct" else ""
        reason = (it["reason"] or "").splitlines()[0][:160] if status != "correct" else ""
        print(f"  [{it['index']}] {it['pass']:<12} {status}{timing}{'  ' + reason if reason else ''}")
    best = summary["best"]
    if best:
        print(f"  best: iteration {best['iteration']}, {fmt_ms(best['candidate_ms'])}, "
              f"{fmt_x(best['speedup_vs_eager'])} vs eager, {fmt_x(best['speedup_vs_compiled'])} vs torch.compile")
        if best.get("warning"):
            print(f"  warning: {best['warning']}")
        print(f"  chosen by: {best['chosen_by']}")
        if best.get("head_to_head"):
            print("\n".join(head_to_head_lines(best["head_to_head"])))
    return 0


def resume_run_cmd(args: argparse.Namespace) -> int:
    from ..loop import RunConfig, launch_worker

    db = _db(args)
    with open_store(db) as store:
        store.mark_interrupted_runs()
        config = RunConfig.from_run(store.get_run(args.run_id), **overrides_from_args(args))
    notes = prepare_agent(config, explicit_agent=True)
    if args.detach:
        pid = launch_worker(db, args.run_id, config, resume=True)
        print(f"run {args.run_id} resumed in worker process {pid}", file=sys.stderr)
        if args.json:
            print_json({"run_id": args.run_id, "worker_pid": pid})
        return 0
    with open_store(db) as store:
        store.update_run(args.run_id, config=config.to_record())
    return execute_and_report(db, args.run_id, config, args, notes, resume=True)


def cancel_run_cmd(args: argparse.Namespace) -> int:
    from ..loop import cancel_run

    changed = cancel_run(_db(args), args.run_id)
    print(f"run {args.run_id}: " + ("cancel requested" if changed else "nothing to cancel (not running)"))
    return 0
