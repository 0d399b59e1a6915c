"""Resolve a suite argument into problems: the gallery (all or one level), a KernelBench-layout directory
(`level1/`, `level2/`, ... holding problem files), a single directory of problem files, a text file listing paths
or gallery names, or a comma-separated list of gallery names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError


@dataclass(frozen=True)
class SuiteProblem:
    name: str  # stable id used for resuming: "level1/01_relu"
    level: int | None
    path: Path


def _level_of(path: Path) -> int | None:
    m = re.fullmatch(r"level_?(\d+)", path.parent.name, flags=re.I)
    return int(m.group(1)) if m else None


def _from_directory(root: Path) -> list[SuiteProblem]:
    level_dirs = sorted(d for d in root.iterdir() if d.is_dir() and re.fullmatch(r"level_?\d+", d.name, flags=re.I))
    files = [f for d in level_dirs for f in sorted(d.glob("*.py"))] if level_dirs else sorted(root.glob("*.py"))
    files = [f for f in files if not f.name.startswith("_")]
    return [SuiteProblem(f"{f.parent.name}/{f.stem}" if level_dirs else f.stem, _level_of(f), f) for f in files]


def _gallery(names: list[str] | None = None) -> list[SuiteProblem]:
    from .. import gallery

    if names is None:
        items = gallery.list_problems()
    else:
        items = [gallery.get_problem(n) for n in names]
    return [SuiteProblem(p.name, p.level, Path(p.path)) for p in items]


def resolve_suite(spec: str, level: int | None = None) -> list[SuiteProblem]:
    path = Path(spec)
    if spec == "gallery":
        problems = _gallery()
    elif path.is_dir():
        problems = _from_directory(path)
    elif path.is_file() and path.suffix == ".py":
        problems = [SuiteProblem(path.stem, _level_of(path), path)]
    elif path.is_file():
        problems = []
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            p = (path.parent / line) if not Path(line).is_absolute() else Path(line)
            problems.extend(resolve_suite(str(p) if p.exists() else line))
    elif re.fullmatch(r"gallery:level\d+", spec):
        problems = [p for p in _gallery() if p.level == int(spec.split("level")[1])]
    else:
        try:
            problems = _gallery([s.strip() for s in spec.split(",") if s.strip()])
        except KeyError as e:
            raise UsageError(f"suite {spec!r} is not 'gallery', 'gallery:levelN', a directory, a problem file, a "
                             f"list file, or gallery problem names ({e})") from None
    if level is not None:
        problems = [p for p in problems if p.level == level]
    if not problems:
        raise UsageError(f"suite {spec!r}{f' at level {level}' if level is not None else ''} has no problems")
    return problems
