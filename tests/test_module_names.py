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
        obj = importlib.import_module(module)
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


def test_the_guards_identity_list_names_importable_modules():
    from kforge_core.eval.harness import guards

    for name in guards._IDENTITY_MODULES:
        assert importlib.import_module(name).__name__ == name


def test_a_stale_name_is_caught():
    assert not _resolves("kforge_core.loop_engine") and not _resolves("kforge_core.eval.harness.nothing_here")
    assert _resolves("kforge_core.loop.RunConfig")
