"""Lower a traced graph description (see `trace.py`) into what the synthesizer works with.

Every traced node becomes one or more items, in topological order:
- `Prim`: a primitive the kernels implement — an elementwise function (`pw`) or a row reduction (`red`: sum, mean,
  max, min over the trailing `k` dimensions). Composite operators (softmax, log_softmax, logsumexp, LayerNorm,
  RMSNorm, F.normalize, var/std, eval-mode batch_norm) expand into several primitives that share an `origin`.
- `Py`: a node kept as a PyTorch call in `ModelNew.forward` — a matrix product through the vendor library (`lib`),
  layout/shape glue (`glue`: views, getitem, shape arithmetic; not counted), or an unsupported operator (`kept`).

Nothing here executes problem code: the description is plain JSON produced by the tracing child.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass, field

FLOAT = "float32"
KERNEL_DTYPES = ("float32", "bool")


class Unsupported(Exception):
    """A node the kernels cannot implement (it stays a PyTorch call); the message says why."""


class CannotEmit(Exception):
    """A node that can neither be synthesized nor written as a public PyTorch call: no candidate is possible."""


@dataclass
class Value:
    kind: str  # "t" tensor, "s" Python scalar, "seq", "none", "other", "dtype"
    shape: tuple = ()
    dtype: str = ""
    strides: tuple | None = None
    contiguous: bool = True
    scalar: object = None

    @classmethod
    def from_desc(cls, d: dict | None) -> "Value":
        if not d:
            return cls("other")
        k = d.get("k")
        if k == "t":
            return cls("t", tuple(d["shape"]), d["dtype"], tuple(d["strides"]) if d.get("strides") else None,
                       bool(d.get("contiguous", True)))
        if k == "s":
            return cls("s", scalar=d.get("v"), dtype=d.get("type", ""))
        return cls(k or "other")

    @property
    def is_tensor(self) -> bool:
        return self.kind == "t"


@dataclass
class Prim:
    name: str
    fn: str  # elementwise function name, or "red"
    operands: list  # ("v", name) | ("c", number) | ("cols", k): the row length minus k, as a float
    shape: tuple
    dtype: str  # "float32" | "bool"
    origin: str  # the traced node this came from
    attrs: dict = field(default_factory=dict)
    red: dict | None = None  # {"op": sum|mean|max|min, "k": int, "keepdim": bool, "in_shape": tuple}
    label: str = ""  # the user-facing operator name ("softmax", "gelu", ...)

    @property
    def deps(self) -> list[str]:
        return [o[1] for o in self.operands if o[0] == "v"]


@dataclass
class Py:
    name: str
    code: str  # Python expression over value names
    deps: list[str]
    value: Value
    role: str  # "lib" | "glue" | "kept" | "input" | "param" | "output"
    origin: str
    label: str = ""
    reason: str = ""  # why it is kept
    fresh: bool = False  # produces a new contiguous tensor nobody else holds (a matmul result): reusable in place


@dataclass
class Lowered:
    items: list  # Prim | Py in topological order
    values: dict  # name -> Value
    placeholders: list  # [(name, default_code | None)]
    output_code: str  # the forward's return expression
    output_names: list[str]
    counted: dict  # origin -> category: "kernel" | "lib" | "kept"
    labels: dict  # origin -> label
    kept_reasons: dict  # origin -> reason
    method: str
    notes: list[str]
    imports: set
    names: dict  # value name -> Python variable name in forward


# ----------------------------------------------------------------------------------------------- signatures

_UNARY = {
    "relu", "sigmoid", "tanh", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "abs", "neg", "sqrt",
    "rsqrt", "reciprocal", "square", "erf", "sin", "cos", "floor", "ceil", "round", "trunc", "sign", "silu",
    "mish", "relu6", "hardsigmoid", "hardswish", "selu", "logical_not", "erfc", "softsign", "tan", "atan",
    "sinh", "cosh", "asin", "acos", "frac",
}
_ALIASES = {
    "negative": "neg", "absolute": "abs", "clip": "clamp", "true_divide": "div", "divide": "div", "multiply": "mul",
    "subtract": "sub", "greater": "gt", "less": "lt", "greater_equal": "ge", "less_equal": "le", "not_equal": "ne",
    "expit": "sigmoid", "truediv": "div", "fmax": "maximum", "fmin": "minimum", "swish": "silu",
    "special_expit": "sigmoid",
}
_SIGS = {
    "gelu": ["input", "approximate"],
    "leaky_relu": ["input", "negative_slope", "inplace"],
    "elu": ["input", "alpha", "inplace"],
    "celu": ["input", "alpha", "inplace"],
    "softplus": ["input", "beta", "threshold"],
    "hardtanh": ["input", "min_val", "max_val", "inplace"],
    "threshold": ["input", "threshold", "value", "inplace"],
    "clamp": ["input", "min", "max"],
    "clamp_min": ["input", "min"],
    "clamp_max": ["input", "max"],
    "add": ["input", "other", "alpha"],
    "sub": ["input", "other", "alpha"],
    "rsub": ["input", "other", "alpha"],
    "mul": ["input", "other"],
    "div": ["input", "other", "rounding_mode"],
    "pow": ["input", "exponent"],
    "float_power": ["input", "exponent"],
    "maximum": ["input", "other"], "minimum": ["input", "other"],
    "gt": ["input", "other"], "lt": ["input", "other"], "ge": ["input", "other"], "le": ["input", "other"],
    "eq": ["input", "other"], "ne": ["input", "other"],
    "logical_and": ["input", "other"], "logical_or": ["input", "other"],
    "where": ["condition", "input", "other"],
    "lerp": ["input", "end", "weight"],
    "addcmul": ["input", "tensor1", "tensor2", "value"],
    "sum": ["input", "dim", "keepdim", "dtype"],
    "mean": ["input", "dim", "keepdim", "dtype"],
    "amax": ["input", "dim", "keepdim"], "amin": ["input", "dim", "keepdim"],
    "max": ["input", "dim", "keepdim"], "min": ["input", "dim", "keepdim"],
    "var": ["input", "dim", "unbiased", "keepdim"], "std": ["input", "dim", "unbiased", "keepdim"],
    "logsumexp": ["input", "dim", "keepdim"],
    "softmax": ["input", "dim", "dtype"], "log_softmax": ["input", "dim", "dtype"],
    "layer_norm": ["input", "normalized_shape", "weight", "bias", "eps"],
    "rms_norm": ["input", "normalized_shape", "weight", "eps"],
    "normalize": ["input", "p", "dim", "eps", "out"],
    "norm": ["input", "p", "dim", "keepdim", "dtype"],
    "batch_norm": ["input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"],
    "linear": ["input", "weight", "bias"],
    "matmul": ["input", "other"], "mm": ["input", "mat2"], "bmm": ["input", "mat2"],
    "addmm": ["input", "mat1", "mat2", "beta", "alpha"],
    "baddbmm": ["input", "batch1", "batch2", "beta", "alpha"],
}
_F_SIGS = {  # torch.nn.functional spellings that differ from torch.<name>
    "softmax": ["input", "dim", "_stacklevel", "dtype"],
    "log_softmax": ["input", "dim", "_stacklevel", "dtype"],
    "relu": ["input", "inplace"], "silu": ["input", "inplace"], "mish": ["input", "inplace"],
    "relu6": ["input", "inplace"], "hardsigmoid": ["input", "inplace"], "hardswish": ["input", "inplace"],
    "selu": ["input", "inplace"],
}
_OPERATOR = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "neg": "neg", "pow": "pow",
             "gt": "gt", "lt": "lt", "ge": "ge", "le": "le", "eq": "eq", "ne": "ne", "abs": "abs",
             "getitem": "getitem", "floordiv": "floordiv", "mod": "mod", "and_": "logical_and",
             "or_": "logical_or", "invert": "logical_not", "matmul": "matmul", "pos": "identity"}
_PY_INFIX = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
             "matmul": "@", "gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!=", "and_": "&",
             "or_": "|", "xor": "^", "lshift": "<<", "rshift": ">>"}
_PY_UNARY = {"neg": "-", "pos": "+", "invert": "~", "not_": "not "}

_MODULE_FNS = {  # torch.nn module class -> (function, {attr: argument})
    "ReLU": ("relu", {}), "GELU": ("gelu", {"approximate": "approximate"}), "SiLU": ("silu", {}),
    "Sigmoid": ("sigmoid", {}), "Tanh": ("tanh", {}), "Mish": ("mish", {}), "ReLU6": ("relu6", {}),
    "Hardsigmoid": ("hardsigmoid", {}), "Hardswish": ("hardswish", {}), "SELU": ("selu", {}),
    "LeakyReLU": ("leaky_relu", {"negative_slope": "negative_slope"}), "ELU": ("elu", {"alpha": "alpha"}),
    "CELU": ("celu", {"alpha": "alpha"}), "Softplus": ("softplus", {"beta": "beta", "threshold": "threshold"}),
    "Hardtanh": ("hardtanh", {"min_val": "min_val", "max_val": "max_val"}), "Softsign": ("softsign", {}),
    "Softmax": ("softmax", {"dim": "dim"}), "LogSoftmax": ("log_softmax", {"dim": "dim"}),
    "Threshold": ("threshold", {"threshold": "threshold", "value": "value"}),
}
_GLUE = {
    "getitem", "getattr", "size", "dim", "numel", "view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze",
    "transpose", "permute", "t", "expand", "expand_as", "chunk", "split", "unbind", "narrow", "select",
    "contiguous", "view_as", "reshape_as", "movedim", "swapaxes", "detach", "identity", "slice", "alias",
    "tensor_split", "split_with_sizes", "_unsafe_view", "floordiv", "mod", "squeeze_", "unsqueeze_", "clone",
}
_CASTS = {"float", "to", "type_as", "double", "half", "bfloat16", "type", "_to_copy"}
_LIB = {"linear", "matmul", "mm", "bmm", "addmm", "baddbmm"}
_COMPARE = {"gt", "lt", "ge", "le", "eq", "ne", "logical_and", "logical_or", "logical_not"}


def py_name(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    if not ident or ident[0].isdigit() or keyword.iskeyword(ident):
        ident = "v_" + ident
    return ident


# ------------------------------------------------------------------------------------------ argument decoding

class _Arg:
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
                return tuple(_Arg.const(x) for x in a["tuple"])
            if "float" in a:
                return float(a["float"])
            if "slice" in a:
                return slice(*(_Arg.const(x) for x in a["slice"]))
            if "ellipsis" in a:
                return Ellipsis
            if "dtype" in a:
                return ("dtype", a["dtype"])
            raise Unsupported(f"unsupported constant {a}")
        if isinstance(a, list):
            return [_Arg.const(x) for x in a]
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


def _module_access(path: str) -> str:
    out = "self"
    for part in path.split("."):
        if part.isdigit():
            out += f"[{part}]"
        elif part.isidentifier() and not keyword.iskeyword(part) and not part.startswith("_"):
            out += f".{part}"
        else:
            return f"self.get_submodule({path!r})"
    return out


def _attr_access(path: str) -> str:
    mod, _, attr = path.rpartition(".")
    base = _module_access(mod) if mod else "self"
    if attr.isidentifier() and not attr.startswith("_"):
        return f"{base}.{attr}"
    raise Unsupported(f"attribute {path!r} has a name a candidate cannot spell")


# --------------------------------------------------------------------------------------------------- lowering

class Lowerer:
    def __init__(self, desc: dict, conservative: bool = False):
        self.desc = desc
        self.conservative = conservative  # keep reductions in PyTorch (a fallback after a failed candidate)
        self.nodes = desc["nodes"]
        self.by_name = {n["name"]: n for n in self.nodes}
        self.users: dict[str, list[str]] = {n["name"]: [] for n in self.nodes}
        for n in self.nodes:
            for ref in self._refs(n):
                self.users.setdefault(ref, []).append(n["name"])
        self.values = {n["name"]: Value.from_desc(n.get("value")) for n in self.nodes}
        self.modules = {m["path"]: m for m in desc.get("modules", [])}
        self.names: dict[str, str] = {}
        self.items: list = []
        self.counted: dict[str, str] = {}
        self.labels: dict[str, str] = {}
        self.kept_reasons: dict[str, str] = {}
        self.imports: set = set()
        self.notes: list[str] = list(desc.get("notes", []))
        self.dropped: set[str] = set()
        self.aliases: dict[str, str] = {}  # max(...).values accessor -> the reduction replacing it
        self._syn = 0
        self.state_keys = set()
        for cfg in desc.get("configs", [])[:1]:
            self.state_keys = set(cfg.get("state", {}))

    @staticmethod
    def _refs(n: dict) -> list[str]:
        out = []

        def walk(a):
            if isinstance(a, dict):
                if "n" in a:
                    out.append(a["n"])
                else:
                    for v in a.values():
                        if isinstance(v, (list, dict)):
                            walk(v)
            elif isinstance(a, list):
                for x in a:
                    walk(x)

        walk(n.get("args", []))
        walk(n.get("kwargs", {}))
        return out

    # --- helpers ---------------------------------------------------------------------------------------
    def syn(self, base: str) -> str:
        self._syn += 1
        name = f"{base}__{self._syn}"
        self.names[name] = py_name(name)
        return name

    def val(self, ref) -> Value:
        if _Arg.is_node(ref):
            return self.values[self.aliases.get(ref["n"], ref["n"])]
        return Value("c", scalar=ref)

    def operand(self, a) -> tuple:
        """A Prim operand for an encoded argument: a traced value or a numeric constant."""
        if _Arg.is_node(a):
            name = self.aliases.get(a["n"], a["n"])
            v = self.values[name]
            if v.kind == "t":
                if v.dtype not in KERNEL_DTYPES:
                    raise Unsupported(f"{name} is {v.dtype}; the kernels handle float32 (and bool masks)")
                return ("v", name)
            if v.kind == "s" and v.dtype in ("float", "int", "bool"):
                return ("v", name)
            raise Unsupported(f"operand {name} is not a tensor or a number")
        c = _Arg.const(a)
        if isinstance(c, bool) or isinstance(c, (int, float)):
            return ("c", c)
        raise Unsupported(f"operand {c!r} is not a number")

    def tensor_operand(self, a, what: str) -> tuple:
        op = self.operand(a)
        if op[0] != "v" or not self.values[op[1]].is_tensor:
            raise Unsupported(f"{what} must be a tensor")
        return op

    def canon(self, n: dict) -> tuple[str, dict]:
        """(normalized operator name, bound arguments) for a call node."""
        op, target = n["op"], n["target"] or ""
        args, kwargs = list(n.get("args", [])), dict(n.get("kwargs", {}))
        if op == "call_module":
            mod = n.get("module") or {}
            cls = mod.get("cls", "")
            if cls in ("Identity",) or (cls.startswith("Dropout") and (mod.get("attrs", {}).get("p") == 0
                                                                         or not mod.get("training", True))):
                return "identity", {"input": args[0] if args else None}
            if cls in _MODULE_FNS:
                fn, attr_map = _MODULE_FNS[cls]
                bound = {"input": args[0] if args else kwargs.get("input")}
                for attr, arg in attr_map.items():
                    if attr in mod.get("attrs", {}):
                        bound[arg] = mod["attrs"][attr]
                return fn, bound
            if cls == "LayerNorm":
                a = mod.get("attrs", {})
                params = {p["name"] for p in self.modules.get(target, {}).get("params", [])}
                return "layer_norm", {"input": args[0], "normalized_shape": a.get("normalized_shape"),
                                      "weight": self.param_ref(f"{target}.weight") if "weight" in params else None,
                                      "bias": self.param_ref(f"{target}.bias") if "bias" in params else None,
                                      "eps": a.get("eps", 1e-5)}
            if cls == "RMSNorm":
                a = mod.get("attrs", {})
                params = {p["name"] for p in self.modules.get(target, {}).get("params", [])}
                return "rms_norm", {"input": args[0], "normalized_shape": a.get("normalized_shape"),
                                    "weight": self.param_ref(f"{target}.weight") if "weight" in params else None,
                                    "eps": a.get("eps")}
            if cls == "Linear":
                params = {p["name"] for p in self.modules.get(target, {}).get("params", [])}
                return "linear", {"input": args[0], "weight": self.param_ref(f"{target}.weight"),
                                  "bias": self.param_ref(f"{target}.bias") if "bias" in params else None}
            return "module:" + cls, {}
        if op == "call_method":
            name = _ALIASES.get(target, target) or target
            sig = _SIGS.get(name, ["input"] if name in _UNARY else None)
            return name, self._bind(name, sig, args, kwargs)
        if op == "call_function":
            if target.startswith("aten."):
                name = target.split(".")[1]
                schema = ["input" if s == "self" else s for s in n.get("schema") or []]
                name = _ALIASES.get(name, name) or name
                if name == "max" and target.endswith(".other") or name == "min" and target.endswith(".other"):
                    name = "maximum" if name == "max" else "minimum"
                if target.endswith(".Scalar") and name == "pow" and schema and schema[0] != "input":
                    pass
                return name, self._bind(name, schema or _SIGS.get(name), args, kwargs)
            home, _, fname = target.rpartition(".")
            if home == "operator":
                name = _OPERATOR.get(fname, "operator:" + fname)
                if name in ("neg", "abs", "logical_not", "identity"):
                    return name, {"input": args[0]}
                return name, {"input": args[0] if args else None, "other": args[1] if len(args) > 1 else None}
            if home == "builtins":
                return "builtin:" + fname, {}
            if home in ("torch", "torch.nn.functional", "torch.special"):
                name = _ALIASES.get(fname, fname) or fname
                if home == "torch.special" and fname.startswith("erf"):
                    name = fname
                sig = (_F_SIGS.get(name) if home == "torch.nn.functional" else None) or _SIGS.get(name) or (
                    ["input", "inplace"] if name in _UNARY else None)
                bound = self._bind(name, sig, args, kwargs)
                if name in ("max", "min") and _Arg.is_node(bound.get("dim")):
                    name = "maximum" if name == "max" else "minimum"
                    bound = {"input": bound["input"], "other": bound["dim"]}
                return name, bound
            return "function:" + target, {}
        return op, {}

    @staticmethod
    def _bind(name: str, sig: list | None, args: list, kwargs: dict) -> dict:
        bound = dict(kwargs)
        if "self" in bound:
            bound["input"] = bound.pop("self")
        if sig is None:
            bound.update({f"arg{i}": a for i, a in enumerate(args)})
            if args:
                bound["input"] = args[0]
            return bound
        for i, a in enumerate(args):
            if i < len(sig):
                bound[sig[i]] = a
            else:
                bound[f"arg{i}"] = a
        return bound

    def param_ref(self, path: str) -> dict:
        """A reference to a module parameter (`self.fc.weight`), as a synthetic get_attr value."""
        key = "param:" + path
        if key not in self.values:
            mod, _, attr = path.rpartition(".")
            entry = next((p for p in self.modules.get(mod, {}).get("params", []) + self.modules.get(mod, {}).get(
                "buffers", []) if p["name"] == attr), None)
            if entry is None:
                raise Unsupported(f"no parameter {path}")
            name = py_name("p_" + path.replace(".", "_"))
            while name in self.names.values():
                name += "_"
            self.names[key] = name
            shape = tuple(entry["shape"])
            self.values[key] = Value("t", shape, entry["dtype"], _contig_strides(shape), True)
            self.items.append(Py(key, _attr_access(path), [], self.values[key], "param", key))
        return {"n": key}

    # --- main ------------------------------------------------------------------------------------------
    def lower(self) -> Lowered:
        placeholders = []
        output_code, output_names = "None", []
        self._prepass()
        for n in self.nodes:
            name, op = n["name"], n["op"]
            self.names.setdefault(name, py_name(name) if op == "placeholder" else py_name("t_" + name))
        for n in self.nodes:
            name, op = n["name"], n["op"]
            if name in self.dropped:
                continue
            if op == "placeholder":
                default = None
                if n.get("args"):
                    try:
                        default = render(n["args"][0], self.names, self.imports)
                    except Unsupported:
                        default = None
                placeholders.append((self.names[name], default))
                self.items.append(Py(name, self.names[name], [], self.values[name], "input", name))
                continue
            if op == "get_attr":
                try:
                    self._get_attr(n)
                except Unsupported as e:
                    raise CannotEmit(str(e)) from None
                continue
            if op == "output":
                output_code = render(n["args"][0], self._alias_names(), self.imports)
                output_names = [self.aliases.get(r, r) for r in self._refs(n)]
                continue
            self._call(n)
        return Lowered(self.items, self.values, placeholders, output_code, output_names, self.counted, self.labels,
                       self.kept_reasons, self.desc.get("method", "fx"), self.notes, self.imports,
                       self._alias_names())

    def _alias_names(self) -> dict:
        names = dict(self.names)
        for a, b in self.aliases.items():
            names[a] = self.names[b]
        return names

    def _prepass(self) -> None:
        """`torch.max(x, dim)` whose users only read `.values` / `[0]` becomes a max reduction."""
        for n in self.nodes:
            if n["op"] not in ("call_function", "call_method"):
                continue
            try:
                name, bound = self.canon(n)
            except Exception:  # noqa: BLE001
                continue
            if name not in ("max", "min") or bound.get("dim") is None or _Arg.is_node(bound.get("dim")):
                continue
            users = [self.by_name[u] for u in self.users.get(n["name"], [])]
            if users and all(self._is_values_accessor(u, n["name"]) for u in users):
                self.dropped.add(n["name"])
                for u in users:
                    u["_values_of"] = n

    @staticmethod
    def _is_values_accessor(u: dict, src: str) -> bool:
        if u["op"] != "call_function" or len(u.get("args", [])) < 2 or u["args"][0] != {"n": src}:
            return False
        if u["target"] == "operator.getitem":
            return u["args"][1] == 0
        return u["target"] == "builtins.getattr" and u["args"][1] == "values"

    def _get_attr(self, n: dict) -> None:
        name, target = n["name"], n["target"]
        v = self.values[name]
        try:
            if target not in self.state_keys:
                raise Unsupported(f"{target!r} is not a parameter or persistent buffer of Model (a plain tensor "
                                  f"attribute or a non-persistent buffer), so a standalone candidate cannot copy it")
            code = _attr_access(target)
        except Unsupported as e:
            raise Unsupported(str(e)) from None
        self.items.append(Py(name, code, [], v, "param", name))

    # --- calls -----------------------------------------------------------------------------------------
    def _call(self, n: dict) -> None:
        name = n["name"]
        src = n.get("_values_of")
        if src is not None and src["name"] not in self.dropped:
            self._py_call(n, "glue")
            return
        if src is not None:
            try:
                _, bound = self.canon(src)
                fn = "max" if (src["target"].endswith("max") or src["target"].startswith("aten.max")) else "min"
                self._reduction(name, fn, bound, name_override=name, origin=name, label=f"{fn}(dim)")
                return
            except Unsupported as e:
                self.dropped.discard(src["name"])
                self._keep(src, str(e))
                self._py_call(n, "glue")
                return
        try:
            cname, bound = self.canon(n)
        except Unsupported as e:
            self._keep(n, str(e))
            return
        value = self.values[name]
        self.labels[name] = cname.split(":")[-1]
        try:
            if cname in _GLUE or cname.startswith("builtin:") or cname.startswith("operator:") or \
                    value.kind in ("s", "dtype", "none") or (value.kind != "t" and cname in _PY_SCALAR_OPS):
                try:
                    self._py_call(n, "glue")
                except Unsupported as e:
                    raise CannotEmit(f"node {name} ({cname}) cannot be written as a PyTorch call in a standalone "
                                     f"candidate ({e})") from None
                return
            if value.kind != "t":
                raise Unsupported(f"{cname} returns a {value.kind}")
            if cname in _CASTS:
                raise Unsupported("dtype conversions stay in PyTorch")
            if n["target"] and str(n["target"]).endswith("_") and n["op"] == "call_method":
                raise Unsupported("in-place methods stay in PyTorch")
            if bound.get("inplace") is True:
                raise Unsupported("inplace=True stays in PyTorch")
            if cname in _LIB:
                self._lib(n, cname, bound)
                return
            if self.conservative and cname in _ROW_OPS:
                raise Unsupported("reductions kept in PyTorch in the conservative variant")
            if cname in _ROW_OPS:
                self._row_op(n, cname, bound)
                return
            self._pointwise(n, cname, bound)
        except Unsupported as e:
            self._keep(n, str(e))

    def _keep(self, n: dict, reason: str) -> None:
        label = self.labels.get(n["name"]) or (n.get("module") or {}).get("cls", "").lower() or str(n["target"])
        if n["op"] == "call_module":
            label = (n.get("module") or {}).get("cls", label).lower()
        label = label.split(":")[-1].split(".")[-1]
        self.labels[n["name"]] = label
        try:
            self._py_call(n, "kept")
        except Unsupported as e:
            raise CannotEmit(f"node {n['name']} ({label}) has no kernel template ({reason}) and cannot be kept as "
                             f"a PyTorch call in a standalone candidate ({e})") from None
        self.kept_reasons[n["name"]] = reason

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
            code = f"{_module_access(target)}({arglist(args, kwargs)})"
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
            dim = _Arg.const(args[1]) if len(args) > 1 else 0
            start = r[2] if len(r) > 2 else "None"
            end = r[3] if len(r) > 3 else "None"
            step = r[4] if len(r) > 4 else "None"
            nd = len(self.values[args[0]["n"]].shape) if _Arg.is_node(args[0]) else 1
            dim = dim % max(nd, 1)
            return f"{r[0]}[{'slice(None), ' * dim}slice({start}, {end}, {step})]"
        if emit["style"] == "function":
            return f"{emit['name']}({', '.join(r + kw)})"
        return f"{r[0]}.{emit['name']}({', '.join(r[1:] + kw)})"

    # --- matrix products -------------------------------------------------------------------------------
    def _lib(self, n: dict, cname: str, bound: dict) -> None:
        name = n["name"]
        names = self._alias_names()
        out = self.values[name]
        if out.dtype != FLOAT:
            raise Unsupported(f"{cname} on {out.dtype}")
        bias = None
        if cname == "linear":
            x, w = bound["input"], bound["weight"]
            code = f"torch.nn.functional.linear({render(x, names, self.imports)}, {render(w, names, self.imports)})"
            deps = [x, w]
            bias = bound.get("bias")
        elif cname in ("addmm", "baddbmm"):
            if _Arg.const(bound.get("beta", 1)) != 1 or _Arg.const(bound.get("alpha", 1)) != 1:
                raise Unsupported(f"{cname} with beta/alpha")
            a, b = (bound["mat1"], bound["mat2"]) if cname == "addmm" else (bound["batch1"], bound["batch2"])
            fn = "torch.mm" if cname == "addmm" else "torch.bmm"
            code = f"{fn}({render(a, names, self.imports)}, {render(b, names, self.imports)})"
            deps = [a, b]
            bias = bound["input"]
        else:
            a = bound["input"]
            b = bound.get("other", bound.get("mat2"))
            code = f"torch.{cname}({render(a, names, self.imports)}, {render(b, names, self.imports)})"
            deps = [a, b]
        dep_names = [self.aliases.get(d["n"], d["n"]) for d in deps if _Arg.is_node(d)]
        self.labels[name] = cname
        if bias is None or bias == {"n": None}:
            self.items.append(Py(name, code, dep_names, out, "lib", name, label=cname, fresh=True))
            self.counted[name] = "lib"
            return
        mm = self.syn(name + "_mm")
        self.values[mm] = Value("t", out.shape, FLOAT, _contig_strides(out.shape), True)
        bias_op = self.tensor_operand(bias, "bias")
        if self.values[bias_op[1]].dtype != FLOAT:
            raise Unsupported("bias is not float32")
        self.items.append(Py(mm, code, dep_names, self.values[mm], "lib", name, label=cname, fresh=True))
        self.items.append(Prim(name, "add", [("v", mm), bias_op], out.shape, FLOAT, name, label="bias"))
        self.counted[name] = "lib+kernel"

    # --- elementwise -----------------------------------------------------------------------------------
    def _pointwise(self, n: dict, cname: str, b: dict) -> None:
        name = n["name"]
        out = self.values[name]
        if out.dtype not in KERNEL_DTYPES:
            raise Unsupported(f"output dtype {out.dtype}")
        prims = self._pw_prims(name, cname, b, out)
        for p in prims:
            p.origin = name
            p.label = p.label or cname
            self.items.append(p)
        self.counted[name] = "kernel"

    def _pw_prims(self, name: str, cname: str, b: dict, out: Value) -> list[Prim]:
        shape = out.shape
        want_bool = cname in _COMPARE
        if (out.dtype == "bool") != want_bool:
            raise Unsupported(f"{cname} producing {out.dtype}")
        dt = out.dtype

        def P(fn, ops, nm=None, **attrs):
            return Prim(nm or name, fn, ops, shape, dt, name, attrs)

        x = b.get("input")
        if cname == "identity":
            raise Unsupported("identity")
        if cname in _UNARY:
            return [P(cname, [self.operand(x)])]
        if cname == "gelu":
            approx = b.get("approximate", "none")
            if approx not in ("none", "tanh"):
                raise Unsupported(f"gelu approximate={approx!r}")
            return [P("gelu_tanh" if approx == "tanh" else "gelu", [self.operand(x)])]
        if cname in ("leaky_relu",):
            return [P("leaky_relu", [self.operand(x)], slope=float(_Arg.const(b.get("negative_slope", 0.01))))]
        if cname in ("elu", "celu"):
            return [P(cname, [self.operand(x)], alpha=float(_Arg.const(b.get("alpha", 1.0))))]
        if cname == "softplus":
            return [P("softplus", [self.operand(x)], beta=float(_Arg.const(b.get("beta", 1.0))),
                      threshold=float(_Arg.const(b.get("threshold", 20.0))))]
        if cname == "threshold":
            return [P("threshold", [self.operand(x)], threshold=float(_Arg.const(b["threshold"])),
                      value=float(_Arg.const(b["value"])))]
        if cname == "hardtanh":
            lo, hi = _Arg.const(b.get("min_val", -1.0)), _Arg.const(b.get("max_val", 1.0))
            t = self.syn(name + "_lo")
            self.values[t] = out
            return [P("clamp_min", [self.operand(x), ("c", lo)], nm=t), P("clamp_max", [("v", t), ("c", hi)])]
        if cname in ("clamp", "clamp_min", "clamp_max"):
            lo = b.get("min") if cname != "clamp_max" else None
            hi = b.get("max") if cname != "clamp_min" else None
            lo = None if lo is None or lo == {"n": None} else lo
            hi = None if hi is None or hi == {"n": None} else hi
            if lo is None and hi is None:
                raise Unsupported("clamp without bounds")
            if lo is not None and hi is not None:
                t = self.syn(name + "_lo")
                self.values[t] = out
                return [P("clamp_min", [self.operand(x), self.operand(lo)], nm=t),
                        P("clamp_max", [("v", t), self.operand(hi)])]
            if lo is not None:
                return [P("clamp_min", [self.operand(x), self.operand(lo)])]
            return [P("clamp_max", [self.operand(x), self.operand(hi)])]
        if cname in ("add", "sub", "rsub"):
            a, o = self.operand(x), self.operand(b.get("other"))
            alpha = _Arg.const(b.get("alpha", 1)) if b.get("alpha") is not None else 1
            if alpha != 1:
                t = self.syn(name + "_alpha")
                self.values[t] = out
                scaled = P("mul", [o if cname != "rsub" else a, ("c", alpha)], nm=t)
                if cname == "rsub":
                    return [scaled, P("sub", [o, ("v", t)])]
                return [scaled, P(cname, [a, ("v", t)])]
            if cname == "rsub":
                return [P("sub", [o, a])]
            return [P(cname, [a, o])]
        if cname == "div":
            if b.get("rounding_mode") not in (None,):
                raise Unsupported(f"div rounding_mode={b.get('rounding_mode')!r}")
            return [P("div", [self.operand(x), self.operand(b.get("other"))])]
        if cname in ("mul", "maximum", "minimum") or cname in _COMPARE:
            if cname == "logical_not":
                return [P(cname, [self.operand(x)])]
            return [P(cname, [self.operand(x), self.operand(b.get("other"))])]
        if cname in ("pow", "float_power"):
            if cname == "float_power":
                raise Unsupported("float_power computes in float64")
            base, ex = self.operand(x), self.operand(b.get("exponent"))
            return [P("pow", [base, ex])]
        if cname == "where":
            cond = self.operand(b.get("condition"))
            if cond[0] == "v" and self.values[cond[1]].kind == "t" and self.values[cond[1]].dtype != "bool":
                raise Unsupported("where with a non-bool condition")
            return [P("where", [cond, self.operand(x), self.operand(b.get("other"))])]
        if cname == "lerp":
            return [P("lerp", [self.operand(x), self.operand(b.get("end")), self.operand(b.get("weight"))])]
        if cname == "addcmul":
            t = self.syn(name + "_prod")
            self.values[t] = out
            v = _Arg.const(b.get("value", 1))
            ops = [P("mul", [self.operand(b["tensor1"]), self.operand(b["tensor2"])], nm=t)]
            if v != 1:
                t2 = self.syn(name + "_scaled")
                self.values[t2] = out
                ops.append(P("mul", [("v", t), ("c", v)], nm=t2))
                t = t2
            return ops + [P("add", [self.operand(x), ("v", t)])]
        raise Unsupported(f"no kernel template for {cname}")

    # --- reductions and row operators ------------------------------------------------------------------
    def _dims_k(self, x_shape: tuple, dim) -> int:
        """Number of trailing dimensions reduced; raises Unsupported unless `dim` is a suffix of the dims."""
        nd = len(x_shape)
        if dim is None or dim == [] or dim == ():
            return nd
        dims = dim if isinstance(dim, (list, tuple)) else [dim]
        try:
            norm = sorted({int(d) % nd for d in dims}) if nd else []
        except (TypeError, ValueError):
            raise Unsupported(f"reduction over dims {dim!r}") from None
        k = len(norm)
        if norm != list(range(nd - k, nd)):
            raise Unsupported(f"reduction over dim {dim} (not the last dimensions): the row kernels reduce over the "
                              f"trailing dimensions only")
        return k

    def _input(self, b: dict) -> tuple[tuple, Value]:
        op = self.tensor_operand(b.get("input"), "the reduced input")
        v = self.values[op[1]]
        if v.dtype != FLOAT:
            raise Unsupported(f"reduction of {v.dtype}")
        return op, v

    def _red(self, name: str, op: str, x: tuple, in_shape: tuple, k: int, keepdim: bool, origin: str,
             label: str = "") -> Prim:
        nl = len(in_shape) - k
        shape = tuple(in_shape[:nl]) + ((1,) * k if keepdim else ())
        if name not in self.values:
            self.values[name] = Value("t", shape, FLOAT, _contig_strides(shape), True)
        return Prim(name, "red", [x], shape, FLOAT, origin, red={"op": op, "k": k, "keepdim": keepdim,
                                                                  "in_shape": tuple(in_shape)}, label=label)

    def _tmp(self, base: str, shape: tuple, dtype: str = FLOAT) -> str:
        t = self.syn(base)
        self.values[t] = Value("t", tuple(shape), dtype, _contig_strides(shape), True)
        return t

    def _reduction(self, name: str, fn: str, b: dict, name_override: str, origin: str, label: str) -> None:
        x, xv = self._input(b)
        k = self._dims_k(xv.shape, _Arg.const(b.get("dim")) if b.get("dim") is not None else None)
        keepdim = bool(_Arg.const(b.get("keepdim", False)) or False)
        if b.get("dtype") not in (None,):
            raise Unsupported("reduction with dtype=")
        p = self._red(name_override, fn, x, xv.shape, k, keepdim, origin, label=label)
        if self.values[name_override].shape != p.shape:
            raise Unsupported(f"unexpected reduction shape {self.values[name_override].shape}")
        self.items.append(p)
        self.counted[origin] = "kernel"
        self.labels[origin] = label

    def _row_op(self, n: dict, cname: str, b: dict) -> None:
        name = n["name"]
        out = self.values[name]
        if out.dtype != FLOAT:
            raise Unsupported(f"{cname} producing {out.dtype}")
        if cname in ("sum", "mean", "amax", "amin", "max", "min"):
            fn = {"amax": "max", "amin": "min"}.get(cname, cname)
            if cname in ("max", "min") and b.get("dim") is None:
                fn = cname
            self._reduction(name, fn, b, name, name, cname)
            return
        x, xv = self._input(b)
        S = xv.shape
        items: list[Prim] = []

        def red(op, src, keep=True, nm=None):
            nm = nm or self._tmp(f"{name}_{op}", tuple(S[:len(S) - k]) + ((1,) * k if keep else ()))
            p = self._red(nm, op, src, S, k, keep, name, label=cname)
            items.append(p)
            return ("v", nm)

        def pw(fn, ops, shape=None, nm=None, **attrs):
            shape = tuple(shape if shape is not None else S)
            nm = nm or self._tmp(f"{name}_{fn}", shape)
            items.append(Prim(nm, fn, ops, shape, FLOAT, name, attrs, label=cname))
            return ("v", nm)

        if cname in ("softmax", "log_softmax"):
            if b.get("dtype") is not None:
                raise Unsupported(f"{cname} with dtype=")
            dim = _Arg.const(b.get("dim")) if b.get("dim") is not None else None
            if dim is None:
                raise Unsupported(f"{cname} without dim")
            k = self._dims_k(S, dim)
            if k != 1:
                raise Unsupported(f"{cname} over several dims")
            m = red("max", x)
            d = pw("sub", [x, m])
            e = pw("exp", [d])
            s = red("sum", e)
            if cname == "softmax":
                pw("div", [e, s], nm=name)
            else:
                ls = pw("log", [s], shape=self.values[s[1]].shape)
                pw("sub", [d, ls], nm=name)
        elif cname == "logsumexp":
            k = self._dims_k(S, _Arg.const(b.get("dim")))
            keep = bool(_Arg.const(b.get("keepdim", False)))
            m = red("max", x)
            e = pw("exp", [pw("sub", [x, m])])
            if keep:
                s = red("sum", e)
                rs = self.values[s[1]].shape
                pw("add", [pw("log", [s], shape=rs), m], shape=rs, nm=name)
            else:
                s = red("sum", e, keep=False)
                m2 = red("max", x, keep=False)
                pw("add", [pw("log", [s], shape=out.shape), m2], shape=out.shape, nm=name)
        elif cname in ("layer_norm", "rms_norm"):
            ns = _Arg.const(b.get("normalized_shape"))
            ns = tuple(ns) if isinstance(ns, (list, tuple)) else (ns,)
            k = len(ns)
            if tuple(S[len(S) - k:]) != tuple(ns):
                raise Unsupported(f"{cname} normalized_shape {ns} does not match the input's trailing dims")
            eps = b.get("eps")
            eps = _Arg.const(eps) if eps is not None else (1e-5 if cname == "layer_norm" else None)
            if eps is None:
                eps = 1.1920928955078125e-07  # torch.finfo(torch.float32).eps, rms_norm's default
            w = b.get("weight")
            w = None if w is None or w == {"n": None} else self.tensor_operand(w, "weight")
            bias = b.get("bias") if cname == "layer_norm" else None
            bias = None if bias is None or bias == {"n": None} else self.tensor_operand(bias, "bias")
            for t in (w, bias):
                if t is not None and (self.values[t[1]].dtype != FLOAT or self.values[t[1]].shape != ns):
                    raise Unsupported(f"{cname} affine parameters must be float32 of shape {ns}")
            rs = tuple(S[:len(S) - k]) + (1,) * k
            last = None
            if cname == "layer_norm":
                mu = red("mean", x)
                d = pw("sub", [x, mu])
                var = red("mean", pw("mul", [d, d]))
                inv = pw("rsqrt", [pw("add", [var, ("c", eps)], shape=rs)], shape=rs)
                steps = [("mul", [d, inv])]
            else:
                ms = red("mean", pw("mul", [x, x]))
                inv = pw("rsqrt", [pw("add", [ms, ("c", eps)], shape=rs)], shape=rs)
                steps = [("mul", [x, inv])]
            if w is not None:
                steps.append(("mul", [None, w]))
            if bias is not None:
                steps.append(("add", [None, bias]))
            for i, (fn, ops) in enumerate(steps):
                ops = [last if o is None else o for o in ops]
                last = pw(fn, ops, nm=name if i == len(steps) - 1 else None)
        elif cname in ("normalize", "norm"):
            p = _Arg.const(b.get("p", 2.0 if cname == "normalize" else "fro"))
            if p not in (2, 2.0, "fro") or p is None:
                raise Unsupported(f"{cname} with p={p!r}")
            dim = _Arg.const(b.get("dim", 1 if cname == "normalize" else None))
            k = self._dims_k(S, dim)
            if cname == "normalize":
                eps = float(_Arg.const(b.get("eps", 1e-12)))
                if b.get("out") not in (None,):
                    raise Unsupported("normalize(out=...)")
                s = red("sum", pw("mul", [x, x]))
                rs = self.values[s[1]].shape
                nrm = pw("clamp_min", [pw("sqrt", [s], shape=rs), ("c", eps)], shape=rs)
                pw("div", [x, nrm], nm=name)
            else:
                if b.get("dtype") is not None:
                    raise Unsupported("norm with dtype=")
                keep = bool(_Arg.const(b.get("keepdim", False)))
                s = red("sum", pw("mul", [x, x]), keep=keep)
                pw("sqrt", [s], shape=out.shape, nm=name)
        elif cname in ("var", "std"):
            dim = _Arg.const(b.get("dim")) if b.get("dim") is not None else None
            k = self._dims_k(S, dim)
            corr = 1
            if b.get("unbiased") is not None:
                ub = _Arg.const(b["unbiased"])
                if not isinstance(ub, bool):
                    raise Unsupported("var/std with a non-bool unbiased")
                corr = 1 if ub else 0
            if b.get("correction") is not None:
                corr = _Arg.const(b["correction"])
            keep = bool(_Arg.const(b.get("keepdim", False)))
            mu = red("mean", x)
            d = pw("sub", [x, mu])
            ss = red("sum", pw("mul", [d, d]), keep=keep)
            v = pw("div", [ss, ("cols", corr)], shape=out.shape, nm=None if cname == "std" else name)
            if cname == "std":
                pw("sqrt", [v], shape=out.shape, nm=name)
        elif cname == "batch_norm":
            training = _Arg.const(b.get("training", False))
            if training is not False:
                raise Unsupported("batch_norm in training mode (batch statistics) stays in PyTorch")
            nd = len(S)
            if nd < 2:
                raise Unsupported("batch_norm of a rank<2 tensor")
            eps = float(_Arg.const(b.get("eps", 1e-5)))
            C = S[1]
            cshape = (C,) + (1,) * (nd - 2)
            chans = {}
            glue = []
            for key in ("running_mean", "running_var", "weight", "bias"):
                a = b.get(key)
                if a is None or a == {"n": None}:
                    chans[key] = None
                    continue
                t = self.tensor_operand(a, key)
                tv = self.values[t[1]]
                if tv.dtype != FLOAT or tv.shape != (C,):
                    raise Unsupported(f"batch_norm {key} must be float32 of shape ({C},)")
                rname = self.syn(f"{name}_{key}")
                self.values[rname] = Value("t", cshape, FLOAT, _contig_strides(cshape), True)
                code = f"{self.names[t[1]]}.reshape({', '.join(['-1'] + ['1'] * (nd - 2))}" \
                       f"{',' if nd == 2 else ''})"
                glue.append(Py(rname, code, [t[1]], self.values[rname], "glue", name))
                chans[key] = ("v", rname)
            if chans["running_mean"] is None or chans["running_var"] is None:
                raise Unsupported("batch_norm without running statistics")
            self.counted[name] = "kernel"
            inv = pw("rsqrt", [pw("add", [chans["running_var"], ("c", eps)], shape=cshape)], shape=cshape)
            y = pw("mul", [pw("sub", [x, chans["running_mean"]]), inv])
            steps = []
            if chans["weight"] is not None:
                steps.append(("mul", chans["weight"]))
            if chans["bias"] is not None:
                steps.append(("add", chans["bias"]))
            if not steps:
                items[-1].name = name
                self.values[name] = out
            for i, (fn, o) in enumerate(steps):
                y = pw(fn, [y, o], nm=name if i == len(steps) - 1 else None)
            for it in items:
                it.label = "batch_norm"
            self.items.extend(glue)
            self.items.extend(items)
            self.labels[name] = "batch_norm"
            return
        else:
            raise Unsupported(f"no kernel template for {cname}")
        final = next((it for it in items if it.name == name), None)
        if final is None or self.values[name].shape != final.shape:
            raise Unsupported(f"{cname}: synthesized shape {final.shape if final else None} differs from the traced "
                              f"{self.values[name].shape}")
        self.items.extend(items)
        self.counted[name] = "kernel"
        self.labels[name] = cname


_PY_SCALAR_OPS = {"add", "sub", "mul", "div", "neg", "pow", "abs", "gt", "lt", "ge", "le", "eq", "ne"}
_ROW_OPS = {"sum", "mean", "amax", "amin", "max", "min", "softmax", "log_softmax", "logsumexp", "layer_norm",
            "rms_norm", "normalize", "norm", "var", "std", "batch_norm"}


def _contig_strides(shape) -> tuple:
    out, acc = [], 1
    for s in reversed(tuple(shape)):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


def lower(desc: dict, conservative: bool = False) -> Lowered:
    return Lowerer(desc, conservative).lower()
