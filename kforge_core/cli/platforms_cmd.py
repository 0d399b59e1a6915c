"""`platforms`: list the targets, whether each is available here, and why not."""

from __future__ import annotations

import argparse

from ..platform import all_platforms
from .common import print_json


def register(sub) -> None:
    p = sub.add_parser("platforms", help="list targets and their availability on this machine")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    rows = []
    for name, platform in all_platforms().items():
        avail = platform.availability()
        rows.append({"name": name, "title": platform.title, "available": avail.ok, "reason": avail.reason,
                     "formats": list(platform.formats), "profiler": platform.has_profiler})
    if args.json:
        print_json(rows)
        return 0
    for r in rows:
        mark = "available" if r["available"] else "unavailable"
        print(f"{r['name']:<8} {mark:<12} {r['title']} — {r['reason']} (formats: {', '.join(r['formats'])})")
    return 0
