"""KForge's import graph: which rooms (subsystem folders, and the shared modules beside them) import which, on how
many floors, and every import circle between modules (function-level imports included, since they only defer one).

    python scripts/import_graph.py            # summary, room arrows and circles
    python scripts/import_graph.py --rooms    # also each room's arrows

A room is a package folder directly below kforge_core/ or platforms/ (nested packages belong to it: eval/harness is
part of eval), or a module directly in kforge_core/ or platforms/. Floors are the layers of the room graph (a room's floor is one above the
highest room it imports; a circle of rooms shares one floor).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("kforge_core", "platforms")


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for top in TOPS:
        for path in (root / top).rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            if "examples" in rel.parts:
                continue
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    is_pkg = path.name == "__init__.py"
    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    tree = ast.parse(path.read_text())
    type_only = {id(n) for b in ast.walk(tree) if isinstance(b, ast.If) and "TYPE_CHECKING" in ast.unparse(b.test)
                 for stmt in b.body for n in ast.walk(stmt)}  # annotations only: no run-time dependency
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def room_of(module: str, rooms: set[str]) -> str:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in rooms:
            return ".".join(parts[:i])
    return module


def rooms_of(mods: dict[str, Path]) -> set[str]:
    rooms = set()
    for name, path in mods.items():
        parts = name.split(".")
        if path.name == "__init__.py" and len(parts) >= 2:
            rooms.add(name)
        elif len(parts) == 2:
            rooms.add(name)
    return {r for r in rooms if r.count(".") == 1}  # a subsystem is one folder, nested packages included


def sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    comps = sccs(graph)
    comp_of = {v: i for i, c in enumerate(comps) for v in c}
    level: dict[int, int] = {}
    for i, comp in enumerate(comps):  # Tarjan emits a component after everything it reaches
        deps = {comp_of[w] for v in comp for w in graph.get(v, ()) if comp_of[w] != i}
        level[i] = 1 + max((level[d] for d in deps), default=-1)
    return {v: level[comp_of[v]] for v in graph}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--rooms", action="store_true")
    args = ap.parse_args(argv)
    mods = modules(args.root)
    known = set(mods)
    mod_graph = {m: imports_of(m, p, known) for m, p in mods.items()}
    rooms = rooms_of(mods)
    room_graph: dict[str, set[str]] = {room_of(m, rooms): set() for m in mods}
    for m, deps in mod_graph.items():
        r = room_of(m, rooms)
        room_graph[r] |= {room_of(d, rooms) for d in deps} - {r}
    fl = floors(room_graph)
    arrows = sum(len(v) for v in room_graph.values())
    circles = [c for c in sccs(mod_graph) if len(c) > 1]
    room_circles = [c for c in sccs(room_graph) if len(c) > 1]
    print(f"{len(room_graph)} rooms on {max(fl.values()) + 1} floors, {arrows} arrows between rooms; "
          f"{len(mods)} modules, {len(circles)} import circles between modules, {len(room_circles)} between rooms")
    for c in circles:
        print("  module circle:", " <-> ".join(c))
    for c in room_circles:
        print("  room circle:", " <-> ".join(c))
    if args.rooms:
        for r in sorted(room_graph, key=lambda r: (fl[r], r)):
            print(f"  floor {fl[r]:2d}  {r:36s} -> {', '.join(sorted(room_graph[r])) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
