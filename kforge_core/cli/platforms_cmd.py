"""`platforms`: list the targets, whether each is available here, and why not."""

from __future__ import annotations

import argparse

from ..platform import all_platforms
from .common import print_json


def register(sub) -> None:
    p = sub.add_parser("platforms", help="list targets and their availability on this machine")
    p.add_argument("--json", action="store_true")
    p.add_argument("--measure-ceilings", metavar="TARGET",
                   help="measure TARGET's ceilings again now (3 repeats, best kept; refused as untrusted when the "
                        "machine is busy) and print them")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.measure_ceilings:
        from ..eval import ceilings
        from ..platform import get_platform

        platform = get_platform(args.measure_ceilings, require_available=True)
        measured = ceilings.measure(platform)
        in_use = ceilings.remember(platform, measured)
        if args.json:
            print_json({"measured": measured, "in_use": in_use})
        else:
            print(f"{platform.name} ({platform.device_name()}): " + ", ".join(
                f"{k} {measured[k]:g}" for k in ceilings.FIGURES if k in measured) + f"; {ceilings.label(measured)}")
            if in_use is not measured:
                print(f"kept the earlier trusted entry ({ceilings.label(in_use)})")
        return 0
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
