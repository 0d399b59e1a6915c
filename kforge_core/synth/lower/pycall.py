"""Writing a traced node as the PyTorch call that `ModelNew.forward` makes for it (glue and kept nodes).

Only public spellings are allowed: a candidate is a standalone program, so private functions, private
attributes and dangerous builtins raise `Unsupported` instead of being written.
"""

from __future__ import annotations

import keyword

from .args import Arg, render
from .ir import Py, Unsupported

_PY_INFIX = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
             "matmul": "@", "gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!=", "and_": "&",
             "or_": "|", "xor": "^", "lshift": "<<", "rshift": ">>"}
_PY_UNARY = {"neg": "-", "pos": "+", "invert": "~", "not_": "not "}


def module_access(path: str) -> str:
    out = "self"
    for part in path.split("."):
        if part.isdigit():
            out += f"[{part}]"
        elif part.isidentifier() and not keyword.iskeyword(part) and not part.startswith("_"):
            out += f".{part}"
        else:
            return f"self.get_submodule({path!r})"
    return out


def attr_access(path: str) -> str:
    mod, _, attr = path.rpartition(".")
    base = module_access(mod) if mod else "self"
    if attr.isidentifier() and not attr.startswith("_"):
        return f"{base}.{attr}"
    raise Unsupported(f"attribute {path!r} has a name a candidate cannot spell")


class PyCallWriter:
    """Mixed into `Lowerer`: appends `Py` items to its `items` and reads its `names`, `aliases` and `values`."""

    def _py_call(self, n: dict, role: str) -> None:
        name = n["name"]
        names = self._alias_names()
        args = n.get("args", [])
        kwargs = n.get("kwargs", {})
        op, target = n["op"], n["target"]

        def arglist(a, kw):
            parts = [render(x, names, self.imports) for x in a]
            parts += [f"{k}={render(v, names, self.imports)}" for k, v in kw.items()]
            return ", ".join(parts)

        if op == "call_module":
            code = f"{module_access(target)}({arglist(args, kwargs)})"
        elif op == "call_method":
            if not args:
                raise Unsupported(f"method call {target} without a receiver")
            code = f"{render(args[0], names, self.imports)}.{target}({arglist(args[1:], kwargs)})"
        else:
            home, _, fname = target.rpartition(".")
            if home == "operator" and fname in _PY_INFIX and len(args) == 2 and not kwargs:
                code = f"({render(args[0], names, self.imports)} {_PY_INFIX[fname]} " \
                       f"{render(args[1], names, self.imports)})"
            elif home == "operator" and fname in _PY_UNARY and len(args) == 1:
                code = f"({_PY_UNARY[fname]}{render(args[0], names, self.imports)})"
            elif target == "operator.getitem":
                code = f"{render(args[0], names, self.imports)}[{render(args[1], names, self.imports)}]"
            elif target == "builtins.getattr":
                attr = args[1]
                if not isinstance(attr, str) or attr.startswith("_"):
                    raise Unsupported(f"getattr of {attr!r}")
                code = f"{render(args[0], names, self.imports)}.{attr}"
            elif target.startswith("aten."):
                code = self._aten_code(n, names)
            elif target.startswith("<private>"):
                raise Unsupported(f"the traced function {target[9:]} has no public name a candidate may call")
            else:
                if home in ("operator", "math"):
                    self.imports.add(home)
                elif home == "builtins":
                    if fname.startswith("_") or fname in ("eval", "exec", "compile", "open", "getattr", "setattr",
                                                          "globals", "locals", "vars", "__import__"):
                        raise Unsupported(f"builtin {fname}")
                    home = ""
                code = f"{home + '.' if home else ''}{fname}({arglist(args, kwargs)})"
        refs = [self.aliases.get(r, r) for r in self._refs(n)]
        self.items.append(Py(name, code, refs, self.values[name], role, name, label=self.labels.get(name, "")))
        if role == "kept":
            self.counted[name] = "kept"

    def _aten_code(self, n: dict, names: dict) -> str:
        emit = n.get("emit")
        args, kwargs = n.get("args", []), n.get("kwargs", {})
        r = [render(x, names, self.imports) for x in args]
        kw = [f"{k}={render(v, names, self.imports)}" for k, v in kwargs.items()]
        if not emit:
            raise Unsupported(f"{n['target']} has no public PyTorch spelling")
        if emit["style"] == "slice":
            dim = Arg.const(args[1]) if len(args) > 1 else 0
            start = r[2] if len(r) > 2 else "None"
            end = r[3] if len(r) > 3 else "None"
            step = r[4] if len(r) > 4 else "None"
            nd = len(self.values[args[0]["n"]].shape) if Arg.is_node(args[0]) else 1
            dim = dim % max(nd, 1)
            return f"{r[0]}[{'slice(None), ' * dim}slice({start}, {end}, {step})]"
        if emit["style"] == "function":
            return f"{emit['name']}({', '.join(r + kw)})"
        return f"{r[0]}.{emit['name']}({', '.join(r[1:] + kw)})"
