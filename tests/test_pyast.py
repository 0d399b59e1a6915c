"""In-process parses go through `kforge_core.pyast.parse_ast` (one lock): CPython 3.11's AST constructor keeps its
recursion depth in per-interpreter state, and two threads parsing at once raised `SystemError: AST constructor
recursion depth mismatch` in this suite's threaded problem validation (python/cpython#106905)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from kforge_core.pyast import parse_ast

ROOT = Path(__file__).resolve().parents[1]
# modules that import nothing from kforge_core by design (test_gallery checks it), so they parse on their own
STANDALONE = {"kforge_core/gallery.py"}


def test_no_module_calls_ast_parse_directly():
    offenders = []
    for folder in ("kforge_core", "app", "pages", "platforms", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "pyast.py" or path.relative_to(ROOT).as_posix() in STANDALONE:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(r"\bast\.parse\(", line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert not offenders, "parse through kforge_core.pyast.parse_ast: " + ", ".join(offenders)


def test_parse_ast_from_many_threads():
    source = "\n".join(f"def f{i}(x):\n    return [[(x + {i}) * y for y in range(3)] for _ in range(2)]"
                       for i in range(300))
    errors, trees = [], []

    def work():
        try:
            for _ in range(20):
                trees.append(len(parse_ast(source).body))
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(repr(e))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and trees == [300] * 80
    assert parse_ast("a + 1", mode="eval").body.op.__class__.__name__ == "Add"
