"""`ast.parse` behind one lock: CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state,
so two threads building ASTs at once can raise `SystemError: AST constructor recursion depth mismatch`
(python/cpython#106905; seen here in the test suite's threaded problem validation). Every in-process parse goes
through `parse_ast` (but `gallery`'s: it imports nothing from kforge_core by design); parses are short, so the
lock costs nothing noticeable."""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse_ast(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
