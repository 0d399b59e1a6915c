"""The AST checker: the static rules applied to the candidate's Python source.

It follows what each imported name is (aliases, `getattr` with a constant name, values resolved from the modules
already imported in the evaluation child) and flags what `kforge_core.eval.refusals` refuses. String literals that may
be kernel source are handed to `kforge_core.eval.native_scan` by `kforge_core.eval.rules.check_candidate`.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
import types

from .refusals import (
    ALLOWED_DUNDERS,
    ALLOWED_IMPORT_ROOTS,
    ALLOWED_QUALIFIED,
    BANNED_CALLS,
    DENIED_QUALIFIED_PREFIXES,
    FILE_WRITE_ATTRS,
    FORBIDDEN_MODULE_NAMES,
    GLOBAL_STATE_CALLS,
    MODULE_INTERNALS,
    SAFE_BUILTINS,
    VALUE_ALLOWED,
    VALUE_DENIED_MODULES,
    VALUE_MODULE_ROOTS,
    Violation,
)

_MISSING = object()


class _Checker(ast.NodeVisitor):
    def __init__(self, platform_module: str, candidate_api: tuple[str, ...]):
        self.platform_module = platform_module
        self.candidate_api = set(candidate_api)
        self.aliases: dict[str, str] = {}  # local name -> qualified module/object path
        self.direct_calls: set[int] = set()  # Name nodes that are the callee of a call (checked in visit_Call)
        self.bound: set[str] = set()  # names the candidate binds itself (`def forward(self, input)`): not builtins
        self.own: set[str] = set()  # first parameters of its methods and its class names: private attributes ok
        self.violations: list[Violation] = []

    def visit_Module(self, node: ast.Module) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.arg):
                self.bound.add(sub.arg)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                self.bound.add(sub.id)
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(sub.name)
            if isinstance(sub, ast.ClassDef):
                self.own.add(sub.name)
                for item in sub.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.args.posonlyargs + \
                            item.args.args:
                        self.own.add((item.args.posonlyargs + item.args.args)[0].arg)
            elif isinstance(sub, ast.ExceptHandler) and sub.name:
                self.bound.add(sub.name)
        self.generic_visit(node)

    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        self.violations.append(Violation(rule, getattr(node, "lineno", None), message))

    # --- imports -------------------------------------------------------------------------------------------
    def _import_allowed(self, module: str) -> bool:
        root = module.split(".")[0]
        return root in ALLOWED_IMPORT_ROOTS and not self._denied(module) and not any(
            part.startswith("_") and part != "__future__" for part in module.split("."))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not self._import_allowed(alias.name):
                self.flag("imports", node, f"import of {alias.name!r} is not allowed")
            local = alias.asname or alias.name.split(".")[0]
            self.aliases[local] = alias.name if alias.asname else alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag("imports", node, "relative imports are not allowed")
            return
        if module == self.platform_module:
            for alias in node.names:
                if alias.name not in self.candidate_api:
                    self.flag("imports", node, f"{module} exposes only {sorted(self.candidate_api)} to candidates, "
                                               f"not {alias.name!r}")
                self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
            return
        if not self._import_allowed(module):
            self.flag("imports", node, f"import from {module!r} is not allowed")
        for alias in node.names:
            qualified = f"{module}.{alias.name}"
            if alias.name == "*":
                self.flag("imports", node, "star imports are not allowed")
            elif alias.name.startswith("_") or (self._denied(qualified) and qualified not in ALLOWED_QUALIFIED):
                self.flag("imports", node, f"import of {qualified!r} is not allowed")
            else:
                self._check_value(node, qualified)
            self.aliases[alias.asname or alias.name] = qualified

    @staticmethod
    def _denied(qualified: str) -> bool:
        if qualified in ALLOWED_QUALIFIED:
            return False
        return any(qualified == p or qualified.startswith(p + ".") for p in DENIED_QUALIFIED_PREFIXES)

    # --- names and attributes -------------------------------------------------------------------------------
    def _const_getattr(self, node: ast.AST) -> bool:
        """`getattr(obj, "name")` (public constant name): read exactly like `obj.name`."""
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and "getattr" not in self.aliases and len(node.args) in (2, 3) and not node.keywords
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))

    def _qualified(self, node: ast.AST) -> str | None:
        """`nn.functional.relu` -> `torch.nn.functional.relu` when the chain is rooted at an imported name (or a name
        assigned from one); `getattr(x, "name")` counts as `x.name`."""
        parts: list[str] = []
        while True:
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif self._const_getattr(node):
                parts.append(node.args[1].value)
                node = node.args[0]
            else:
                break
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    def visit_Name(self, node: ast.Name) -> None:
        if node.id.startswith("__") and node.id.endswith("__") and node.id not in ALLOWED_DUNDERS:
            self.flag("no-dunder", node, f"use of {node.id} is not allowed")
        elif node.id in BANNED_CALLS | {"getattr"} and node.id not in self.aliases and \
                node.id not in self.bound and id(node) not in self.direct_calls:
            # `f = exec; f(src)` or `reduce(getattr, ...)`: a banned builtin passed around as a value
            self.flag("no-dynamic-code", node, f"use of {node.id} as a value is not allowed")

    # --- values: what a name of an allowed module *is* ---------------------------------------------------------
    @staticmethod
    def _resolve(qualified: str) -> tuple[object, int]:
        """The object `qualified` names, read statically (module dicts, class attributes without descriptors
        running) from modules already imported here (the evaluation child has torch; nothing is imported for
        the check). Returns (value or _MISSING, how many parts resolved)."""
        parts = qualified.split(".")
        if parts[0] not in ALLOWED_IMPORT_ROOTS or parts[0] not in sys.modules:
            return _MISSING, 0
        obj = sys.modules[parts[0]]
        for i, part in enumerate(parts[1:], start=1):
            if isinstance(obj, types.ModuleType):
                found = vars(obj).get(part, _MISSING)
                if found is _MISSING:  # a submodule imported but not yet bound, or a lazy attribute
                    found = sys.modules.get(f"{obj.__name__}.{part}", _MISSING)
            elif isinstance(obj, type):
                try:
                    found = inspect.getattr_static(obj, part)
                except AttributeError:
                    found = _MISSING
            else:
                found = _MISSING
            if found is _MISSING:
                return _MISSING, i
            obj = found
        return obj, len(parts)

    def _value_problem(self, qualified: str, value: object) -> str | None:
        if isinstance(value, types.ModuleType):
            name = value.__name__
            if not (self._import_allowed(name) or name in ALLOWED_QUALIFIED):
                return f"{qualified} is the module {name}, outside the import allow-list"
            return None
        name = getattr(value, "__name__", None)
        if isinstance(name, str) and getattr(builtins, name, _MISSING) is value and not isinstance(value, str):
            if name in SAFE_BUILTINS or (isinstance(value, type) and issubclass(value, BaseException)):
                return None
            return f"{qualified} is the builtin {name}(), not allowed"
        if not callable(value) or qualified in ALLOWED_QUALIFIED:
            return None
        module = getattr(value, "__module__", None)
        if not isinstance(module, str):
            return None
        if module.split(".")[0] not in ALLOWED_IMPORT_ROOTS | VALUE_MODULE_ROOTS:
            return f"{qualified} is {module}.{name or '?'}, from a module outside the import allow-list"
        defined = f"{module}.{name}"
        if any(defined.startswith(p + ".") for p in VALUE_DENIED_MODULES) and defined not in VALUE_ALLOWED:
            return f"{qualified} is {defined}, which is not allowed"
        return None

    def _check_value(self, node: ast.AST, qualified: str) -> bool:
        """Refuse what `qualified` resolves to when it is a module, builtin or function outside the allow-lists;
        where it cannot be resolved, refuse the names of the stdlib modules libraries hand out."""
        value, resolved = self._resolve(qualified)
        problem = self._value_problem(qualified, value) if value is not _MISSING else None
        if problem is None and value is _MISSING:
            parts = qualified.split(".")
            bad = next((p for p in parts[max(resolved, 1):] if p in FORBIDDEN_MODULE_NAMES), None)
            if bad and parts[0] in ALLOWED_IMPORT_ROOTS:
                problem = f"{qualified} names the module {bad!r} (outside the import allow-list)"
        if problem:
            self.flag("resolved-values", node, problem)
        return problem is not None

    def _check_qualified(self, node: ast.AST, qualified: str, store: bool) -> None:
        parts = qualified.split(".")
        if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts):
            self.flag("no-private-torch", node, f"private attribute {qualified} is not allowed")
        elif self._denied(qualified):
            self.flag("imports", node, f"{qualified} is not allowed")
        elif parts[0] == self.platform_module.split(".")[0] and not qualified.startswith(self.platform_module):
            self.flag("imports", node, f"{qualified} is not allowed")
        elif qualified.startswith(self.platform_module + ".") and parts[len(self.platform_module.split("."))] \
                not in self.candidate_api:
            self.flag("imports", node, f"{qualified} is not part of the candidate API")
        else:
            self._check_value(node, qualified)
        if store:
            self.flag("no-patching", node, f"assigning to {qualified} patches a module")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ALLOWED_DUNDERS:
            self.flag("no-dunder", node, f"attribute {node.attr} is not allowed")
        if node.attr in FILE_WRITE_ATTRS:
            self.flag("no-file-writes", node, f"{node.attr} writes files")
        qualified = self._qualified(node)
        if qualified:
            self._check_qualified(node, qualified, isinstance(node.ctx, (ast.Store, ast.Del)))
        elif node.attr.startswith("_") and not (node.attr.startswith("__") and node.attr.endswith("__")) and \
                not self._own_private(node):
            # on any object: `torch.sys.modules["torch"]._C` is rooted at no import the chain check follows
            self.flag("no-private-torch", node, f"private attribute .{node.attr} is not allowed")
        self.generic_visit(node)

    def _own_private(self, node: ast.Attribute) -> bool:
        """`self._cache` on the candidate's own instance or class (not an alias of an import), nn.Module's own
        internals (`self._forward_hooks`, `self._apply`) excepted."""
        root = node.value
        return isinstance(root, ast.Name) and root.id in self.own and root.id not in self.aliases and \
            not MODULE_INTERNALS.match(node.attr)

    def _check_store_target(self, target: ast.AST) -> None:
        # Attributes of imported modules/classes, directly or through a name assigned from one
        # (`t = torch.cuda.Event; t.elapsed_time = f`); other aliases are caught at run time.
        if isinstance(target, ast.Attribute):
            qualified = self._qualified(target)
            if qualified:
                self.flag("no-patching", target, f"assigning to {qualified} patches a module")

    def _bind(self, target: ast.AST, value: ast.AST | None) -> None:
        """Follow plain-name aliases of imported objects (`E = torch.cuda.Event`); rebinding a name drops it."""
        if isinstance(target, ast.Name):
            qualified = self._qualified(value) if value is not None else None
            if qualified:
                self.aliases[target.id] = qualified
            else:
                self.aliases.pop(target.id, None)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and \
                len(value.elts) == len(target.elts) else [None] * len(target.elts)
            for t, v in zip(target.elts, values):
                self._bind(t, v)

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_store_target(t)
        self.generic_visit(node)
        for t in node.targets:
            self._bind(t, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_store_target(node.target)
        self.generic_visit(node)
        self._bind(node.target, node.value)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.generic_visit(node)
        self._bind(node.target, node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store_target(node.target)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self.direct_calls.add(id(func))
        if isinstance(func, ast.Name) and func.id in BANNED_CALLS and func.id not in self.aliases:
            self.flag("no-dynamic-code", node, f"call of {func.id}() is not allowed")
        if isinstance(func, ast.Name) and func.id == "getattr" and func.id not in self.aliases:
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and not name.value.startswith("_")):
                self.flag("no-dynamic-code", node, "getattr() is allowed only with a public constant name")
            elif name.value in FILE_WRITE_ATTRS:
                self.flag("no-file-writes", node, f"{name.value} writes files")
            elif self._const_getattr(node):
                qualified = self._qualified(node)
                if qualified:
                    self._check_qualified(node, qualified, store=False)
        qualified = self._qualified(func)
        if qualified and qualified.split(".")[-1] in GLOBAL_STATE_CALLS and qualified.startswith("torch"):
            self.flag("no-global-state", node, f"{qualified}() changes torch's global state")
        self.generic_visit(node)


def check_python(tree: ast.AST, platform_module: str, candidate_api: tuple[str, ...]) -> list[Violation]:
    """The violations of the Python rules in a parsed candidate, in the order found."""
    checker = _Checker(platform_module, candidate_api)
    checker.visit(tree)
    return checker.violations


def string_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that may be kernel source: docstrings are documentation (never compiled, and they often
    name the very calls the rules forbid); the compile helpers re-check whatever text is actually compiled."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                docstrings.add(id(first.value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            out.append((node.lineno, node.value))
    return out
