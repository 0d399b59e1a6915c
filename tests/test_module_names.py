"""Every module the code names in a string (child entry points, the guards' identity list, run-time imports) exists.

Modules started as `python -m NAME` or imported by name are invisible to import checkers: after a move, a stale name
fails only at run time, in a child. This scans the string literals of the packages for dotted KForge names.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOTTED = re.compile(r"^(kforge_core|platforms)(\.[A-Za-z_]\w*)+$")


def _named_modules() -> dict[str, str]:
    found = {}
    for folder in ("kforge_core", "platforms", "app", "pages"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.match(node.value):
                    found.setdefault(node.value, str(path.relative_to(ROOT)))
    return found


def _resolves(name: str) -> bool:
    """A module, or an attribute of one (`kforge_core.loop.RunConfig`)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and not e.name.startswith(("kforge_core", "platforms")):
                return True  # the module exists; it needs an optional package (ray) this machine lacks
            raise
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_module_named_in_a_string_exists():
    named = _named_modules()
    assert "kforge_core.eval.harness.child" in named and "kforge_core.loop.worker" in named
    missing = {name: where for name, where in named.items() if not _resolves(name)}
    assert not missing, f"strings naming modules that do not exist: {missing}"


def _imports() -> dict[str, str]:
    """Every import of a KForge module anywhere in the tree, function-level ones included (they run only when
    called, so a stale one hides until then), relative ones resolved against their file."""
    found = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in (".git", "build") or "examples" in rel.parts:
            continue
        parts = list(rel.with_suffix("").parts)
        package = parts[:-1]
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue  # fixtures of broken candidates
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names if a.name != "*"] or [base]
            else:
                continue
            for name in names:
                if re.match(r"^(kforge_core|platforms)(\.|$)", name):
                    found.setdefault(name, f"{rel}:{node.lineno}")
    return found


def test_every_import_of_a_kforge_module_resolves():
    found = _imports()
    assert "kforge_core.eval.evaluator.evaluate" in found
    missing = {name: where for name, where in found.items() if not _resolves(name)}
    assert not missing, f"imports of names that do not exist: {missing}"


def test_the_guards_identity_list_names_importable_modules():
    from kforge_core.eval.harness import process_state

    for name in process_state.IDENTITY_MODULES:
        assert importlib.import_module(name).__name__ == name


def test_a_stale_name_is_caught():
    assert not _resolves("kforge_core.loop_engine") and not _resolves("kforge_core.eval.harness.nothing_here")
    assert _resolves("kforge_core.loop.RunConfig")
