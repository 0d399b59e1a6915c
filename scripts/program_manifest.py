"""The built-in synthesizer's generated programs as a checked artifact (in the spirit of tinygrad's process replay).

Every gallery problem x every target x every schedule the optimization pass can reach (the plain first version, each
prefix of the target's move order, and the conservative fallback) is generated and hashed; the hashes live in
`tests/data/program_manifest.json`. A refactor must leave them unchanged; a kernel change updates the manifest in the
same commit, and the commit message says why the listed programs changed.

    python scripts/program_manifest.py --check            # exit 1 and list the programs that changed
    python scripts/program_manifest.py --update           # rewrite the manifest
    python scripts/program_manifest.py --dump DIR         # also write every program to DIR (diff two trees by hand)
    python scripts/program_manifest.py --check --only level1/01_relu --only level2/...

An error (the synthesizer declines a problem on a target) is recorded by its message's hash: a change of reach shows
up as a change too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.gallery import list_problems  # noqa: E402
from kforge_core.platform import discover  # noqa: E402
from kforge_core.synth.schedule import Schedule, first_schedule, order_for

MANIFEST = ROOT / "tests" / "data" / "program_manifest.json"
TARGETS = (("cpu", "cpu"), ("cuda", "cuda"), ("triton", "cuda"), ("metal", "mps"))


def schedules(target: str, device_type: str) -> list[tuple[str, Schedule]]:
    """(label, schedule): plain (the target's first program, `first_schedule`), then each move of the target's order
    on top of the ones before, then conservative."""
    sched, names = first_schedule(target), []
    out = [("plain", sched)]
    for move in order_for(device_type):
        sched, names = sched.with_move(move), names + [move]
        out.append(("+".join(names), sched))
    out.append(("conservative", Schedule(conservative=True)))
    return out


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def generate(problem, agent: BuiltinGenerationAgent) -> dict[str, tuple[str, str]]:
    """key -> (hash, text) for one problem over every target and schedule; text is the program or 'error: ...'."""
    source = problem.path.read_text()
    out = {}
    for target, device_type in TARGETS:
        for label, sched in schedules(target, device_type):
            res = agent.synthesize(source, target, sched, problem_name=problem.name)
            text = res.program if res.program is not None else f"error: {res.error}"
            out[f"{problem.name}|{target}|{label}"] = (_digest(text), text)
    return out


def build(only: list[str] | None = None, jobs: int = 2) -> dict[str, tuple[str, str]]:
    problems = [p for p in list_problems() if not only or p.name in only]
    missing = set(only or ()) - {p.name for p in problems}
    if missing:
        raise SystemExit(f"unknown gallery problem(s): {', '.join(sorted(missing))}")
    discover()  # the platform registry is filled once, before the threads read it
    agent = BuiltinGenerationAgent(size_class="auto")  # as a run builds it: CPU sizes on the CPU target
    result: dict[str, tuple[str, str]] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each trace is a child process: two at a time
        for part in pool.map(lambda p: generate(p, agent), problems):
            result.update(part)
    return dict(sorted(result.items()))


def load() -> dict[str, str]:
    if not MANIFEST.exists():
        return {}
    return json.loads(MANIFEST.read_text())["programs"]


def diff(old: dict[str, str], new: dict[str, str], only: list[str] | None) -> list[str]:
    if only:
        old = {k: v for k, v in old.items() if k.split("|")[0] in only}
    lines = [f"changed  {k}" for k in new if k in old and old[k] != new[k]]
    lines += [f"new      {k}" for k in new if k not in old]
    lines += [f"missing  {k}" for k in old if k not in new]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare with the manifest; exit 1 on any change")
    mode.add_argument("--update", action="store_true", help="rewrite the manifest from the current code")
    ap.add_argument("--only", action="append", help="one gallery problem (repeatable); --update needs all")
    ap.add_argument("--dump", type=Path, help="write every generated program (or error) under this directory")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    if args.update and args.only:
        ap.error("--update rewrites the whole manifest: drop --only")
    built = build(args.only, args.jobs)
    if args.dump:
        for key, (_, text) in built.items():
            path = args.dump / (key.replace("|", "/").replace("+", "_") + ".txt")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    new = {k: h for k, (h, _) in built.items()}
    changes = diff(load(), new, args.only)
    for line in changes:
        print(line)
    if args.update:
        MANIFEST.parent.mkdir(parents=True, exist_ok=True)
        MANIFEST.write_text(json.dumps({"version": 1, "programs": new}, indent=1, sort_keys=True) + "\n")
        print(f"manifest: {len(new)} programs, {len(changes)} changed")
        return 0
    print(f"{len(new)} programs checked, {len(changes)} changed")
    return 1 if changes else 0


if __name__ == "__main__":
    raise SystemExit(main())
