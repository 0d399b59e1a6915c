"""KernelBench-format problems: a `Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`.

`load_problem` does the static checks in the caller's process (the source is parsed, never executed here).
`kforge_core.eval.evaluator.validate_problem` runs the reference in an evaluation child and reports what only running
can tell: inputs that are not tensors, a reference that raises, non-deterministic or input-independent outputs.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ProblemError, UsageError
from .pyast import parse_ast

REQUIRED = {"Model": "class", "get_inputs": "function", "get_init_inputs": "function"}


@dataclass(frozen=True)
class Problem:
    name: str
    source: str
    path: Path | None = None
    description: str = ""

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


@dataclass
class ProblemReport:
    """What running the reference told us. `warnings` are shown to the user; errors raise ProblemError instead."""

    inputs: list[str] = field(default_factory=list)  # "float32[4096, 4096] cpu"
    outputs: list[str] = field(default_factory=list)
    reference_ms: float | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"inputs": self.inputs, "outputs": self.outputs, "reference_ms": self.reference_ms,
                "warnings": self.warnings}


def _first_doc_line(tree: ast.Module) -> str:
    doc = ast.get_docstring(tree) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def parse_problem_source(source: str) -> ast.Module:
    if not source.strip():
        raise ProblemError("the problem is empty: paste a module that defines Model, get_inputs and get_init_inputs")
    try:
        tree = parse_ast(source)
    except SyntaxError as e:
        detail = f"syntax error: {e.msg}"
        if e.text:
            detail += f" — {e.text.strip()!r}"
        raise ProblemError(detail, line=e.lineno) from None
    found: dict[str, tuple[str, int]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = ("class", node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = ("function", node.lineno)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    found[t.id] = ("variable", node.lineno)
    missing = [n for n in REQUIRED if n not in found]
    if missing:
        hint = " (KernelBench format: class Model(nn.Module) with forward, get_inputs() returning a list of " \
               "tensors, get_init_inputs() returning the constructor's arguments)"
        raise ProblemError(f"missing {', '.join(missing)}{hint}")
    for name, kind in REQUIRED.items():
        actual, line = found[name]
        if actual != kind:
            raise ProblemError(f"{name} must be a {kind}, found a {actual}", line=line)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in model.body):
        raise ProblemError("class Model has no forward method", line=model.lineno)
    return tree


def load_problem(path: str | Path | None = None, text: str | None = None, name: str | None = None) -> Problem:
    """Load from a file or from pasted text; raises ProblemError with a line number where one applies."""
    if (path is None) == (text is None):
        raise UsageError("give a problem file or problem text, not both")
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise UsageError(f"problem file not found: {p}")
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            raise ProblemError(f"{p} is not a UTF-8 text file") from None
        name = name or p.stem
    assert text is not None
    tree = parse_problem_source(text)
    if not name:
        m = re.search(r"class\s+Model\b", text)
        name = f"pasted_{hashlib.sha256(text.encode()).hexdigest()[:8]}" if m else "pasted"
    return Problem(name=name, source=text, path=Path(path) if path else None, description=_first_doc_line(tree))
