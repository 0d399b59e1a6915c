"""Encoded arguments of the traced description (see `trace.py`): read them as constants, write them as Python.

A node reference is `{"n": name}`; tuples, slices, dtypes, devices and non-finite floats have their own tagged
forms so the description stays plain JSON.
"""

from __future__ import annotations

import math

from .ir import Unsupported


class Arg:
    """Helpers around encoded arguments."""

    @staticmethod
    def is_node(a) -> bool:
        return isinstance(a, dict) and "n" in a

    @staticmethod
    def const(a):
        """Python value of a constant argument (raises Unsupported for nodes and opaque values)."""
        if isinstance(a, dict):
            if "n" in a:
                raise Unsupported("argument is a traced value, expected a constant")
            if "tuple" in a:
                return tuple(Arg.const(x) for x in a["tuple"])
            if "float" in a:
                return float(a["float"])
            if "slice" in a:
                return slice(*(Arg.const(x) for x in a["slice"]))
            if "ellipsis" in a:
                return Ellipsis
            if "dtype" in a:
                return ("dtype", a["dtype"])
            raise Unsupported(f"unsupported constant {a}")
        if isinstance(a, list):
            return [Arg.const(x) for x in a]
        return a


def render(a, names: dict, imports: set) -> str:
    """Python source for an encoded argument; node references become their variable names."""
    if isinstance(a, dict):
        if "n" in a:
            return names[a["n"]]
        if "tuple" in a:
            items = [render(x, names, imports) for x in a["tuple"]]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if "slice" in a:
            return "slice(" + ", ".join(render(x, names, imports) for x in a["slice"]) + ")"
        if "ellipsis" in a:
            return "..."
        if "dtype" in a:
            return f"torch.{a['dtype']}"
        if "device" in a:
            return f"torch.device({a['device']!r})"
        if "torch" in a:
            return f"torch.{a['torch']}"
        if "float" in a:
            imports.add("math")
            return {"inf": "math.inf", "-inf": "-math.inf", "nan": "math.nan"}[a["float"]]
        raise Unsupported(f"cannot write {a.get('opaque', a)} as Python")
    if isinstance(a, list):
        return "[" + ", ".join(render(x, names, imports) for x in a) + "]"
    if isinstance(a, float):
        if math.isinf(a) or math.isnan(a):
            imports.add("math")
            return "math.inf" if a > 0 else ("-math.inf" if a < 0 else "math.nan")
        return repr(a)
    return repr(a)
