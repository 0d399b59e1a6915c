"""Lower a traced graph description (see `trace.py`) into what the synthesizer works with: `lower(desc)`.

`Lowerer` walks the traced nodes in order and classifies each call: glue and scalar arithmetic stay PyTorch calls,
matrix products go to the vendor library, row operators and elementwise operators become kernel primitives, and
anything the kernels cannot do is kept as a PyTorch call with a reason. The pieces live in their own modules:
`ir` (the lowered form), `args` (encoded arguments), `operators` (operator names and classes), `pycall` (PyTorch
calls for forward), `matmul`, `pointwise`, `rowops`, `losses` and `pooling` (the lowerings), `cse` (duplicate
primitives merged).

Nothing here executes problem code: the description is plain JSON produced by the tracing child.
"""

from __future__ import annotations

from .args import Arg, render
from .colops import SCAN_OPS, ColumnLowering
from .constants import FILLS, ConstantLowering, prune_constants
from .cse import merge_duplicates
from .ir import FLOAT, KERNEL_DTYPES, CannotEmit, Lowered, Prim, Py, Unsupported, Value, contig_strides, py_name
from .losses import LOSSES, LossLowering
from .matmul import MatmulLowering
from .operators import CASTS, DROPOUT_KEPT, GLUE, LIB, PY_SCALAR_OPS, ROW_OPS, OperatorCanon
from .pointwise import PointwiseLowering
from .pooling import PoolingLowering, pooling_kind
from .pycall import PyCallWriter, attr_access
from .rowops import RowOpLowering

# The names other modules import from here; the lowered form itself lives in `ir`.
__all__ = ["FLOAT", "KERNEL_DTYPES", "CannotEmit", "Lowered", "Lowerer", "Prim", "Py", "Unsupported", "Value",
           "lower", "py_name", "render"]


class Lowerer(OperatorCanon, PyCallWriter, MatmulLowering, PointwiseLowering, RowOpLowering, PoolingLowering,
              ColumnLowering, LossLowering, ConstantLowering):
    """One lowering of one description. The mixins hold the per-operator lowerings; they share the state set up
    here (`values`, `items`, `names`, `counted`, `labels`, ...) rather than passing it around."""

    def __init__(self, desc: dict, conservative: bool = False, fuse_cat: bool = True, halves: tuple = (),
                 columns: bool = False):
        self.desc = desc
        self.columns = columns  # the target's writer has column kernels (`colops`: other-dim reductions, scans)
        self.halves = tuple(halves)  # half-precision dtypes the target's writer reads, writes and rounds to
        self.conservative = conservative  # keep reductions in PyTorch (a fallback after a failed candidate)
        self.fuse_cat = fuse_cat  # the target's writer evaluates `cat` primitives (last-dim concatenation)
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
        self.consts: dict[str, object] = {}  # 0-dim constant tensors (`constants`) -> the number they hold
        self._syn = 0
        self.pipelines: list[dict] = []
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
        if Arg.is_node(ref):
            return self.values[self.aliases.get(ref["n"], ref["n"])]
        return Value("c", scalar=ref)

    def operand(self, a) -> tuple:
        """A Prim operand for an encoded argument: a traced value or a numeric constant."""
        if Arg.is_node(a):
            name = self.aliases.get(a["n"], a["n"])
            if name in self.consts:  # torch.tensor(0.5): the kernel reads the number
                return ("c", self.consts[name])
            v = self.values[name]
            if v.kind == "t":
                if v.dtype not in KERNEL_DTYPES + self.halves:
                    have = "float32" + "".join(f", {h}" for h in self.halves)
                    raise Unsupported(f"{name} is {v.dtype}; the kernels handle {have} (and bool masks)")
                return ("v", name)
            if v.kind == "s" and v.dtype in ("float", "int", "bool"):
                return ("v", name)
            raise Unsupported(f"operand {name} is not a tensor or a number")
        c = Arg.const(a)
        if isinstance(c, bool) or isinstance(c, (int, float)):
            return ("c", c)
        raise Unsupported(f"operand {c!r} is not a number")

    def tensor_operand(self, a, what: str) -> tuple:
        op = self.operand(a)
        if op[0] != "v" or not self.values[op[1]].is_tensor:
            raise Unsupported(f"{what} must be a tensor")
        return op

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
            self.values[key] = Value("t", shape, entry["dtype"], contig_strides(shape), True)
            self.items.append(Py(key, attr_access(path), [], self.values[key], "param", key))
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
        self.items = prune_constants(self.items, self.consts, output_names)
        return Lowered(self.items, self.values, placeholders, output_code, output_names, self.counted, self.labels,
                       self.kept_reasons, self.desc.get("method", "fx"), self.notes, self.imports,
                       self._alias_names(), self.pipelines)

    def _alias_names(self) -> dict:
        names = dict(self.names)
        for a, b in self.aliases.items():
            names[a] = self.names[b]
        return names

    def _prepass(self) -> None:
        """`torch.max(x, dim)` whose users only read `.values` / `[0]` becomes a max reduction; a scan between
        two flips becomes one reversed scan (`_scan_prepass`)."""
        self._scan_prepass()
        for n in self.nodes:
            if n["op"] not in ("call_function", "call_method"):
                continue
            try:
                name, bound = self.canon(n)
            except Exception:  # noqa: BLE001
                continue
            if name not in ("max", "min") or bound.get("dim") is None or Arg.is_node(bound.get("dim")):
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
            if target not in self.state_keys and self._attr_constant(n):
                return
            if target not in self.state_keys:
                raise Unsupported(f"{target!r} is not a parameter or persistent buffer of Model (a plain tensor "
                                  f"attribute or a non-persistent buffer), so a standalone candidate cannot copy it")
            code = attr_access(target)
        except Unsupported as e:
            raise Unsupported(str(e)) from None
        self.items.append(Py(name, code, [], v, "param", name))

    # --- calls -----------------------------------------------------------------------------------------
    def _call(self, n: dict) -> None:
        name = n["name"]
        if n.get("_reverse_scan"):
            try:
                self._reverse_scan(n)
            except Unsupported:  # the flips and the scan are lowered as they were traced
                for m in n.pop("_reverse_scan")[::-1]:
                    self.dropped.discard(m["name"])
                    self._call(m)
                self._call(n)
            return
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
            if cname in GLUE or cname.startswith("builtin:") or cname.startswith("operator:") or \
                    value.kind in ("s", "dtype", "none") or (value.kind != "t" and cname in PY_SCALAR_OPS):
                try:
                    self._py_call(n, "glue")
                except Unsupported as e:
                    raise CannotEmit(f"node {name} ({cname}) cannot be written as a PyTorch call in a standalone "
                                     f"candidate ({e})") from None
                return
            if (pool := pooling_kind(cname)) is not None:
                if self.conservative:
                    raise Unsupported("pooling kept in PyTorch in the conservative variant")
                self._pool(n, cname, *pool)
                return
            if value.kind != "t":
                raise Unsupported(f"{cname} returns a {value.kind}")
            if cname == "dropout":
                raise Unsupported(DROPOUT_KEPT)
            if cname == "tensor":
                self._tensor_of_number(n)
                return
            if cname in FILLS:
                self._fill(n, cname, bound)
                return
            if cname in CASTS:
                self._cast(n, cname)
                return
            if n["target"] and str(n["target"]).endswith("_") and n["op"] == "call_method":
                raise Unsupported("in-place methods stay in PyTorch")
            if bound.get("inplace") is True:
                raise Unsupported("inplace=True stays in PyTorch")
            if cname in LIB:
                self._lib(n, cname, bound)
                return
            if self.conservative and cname in ROW_OPS:
                raise Unsupported("reductions kept in PyTorch in the conservative variant")
            if cname in ROW_OPS:
                self._row_op(n, cname, bound)
                return
            if cname in SCAN_OPS:
                self._scan(n, cname, bound)
                return
            if cname in LOSSES:
                if self.conservative:
                    raise Unsupported("losses (reductions) kept in PyTorch in the conservative variant")
                self._loss(n, cname, bound)
                return
            if cname == "cat":
                self._cat(n, bound)
                return
            self._pointwise(n, cname, bound)
        except Unsupported as e:
            self._keep(n, str(e))

    def _cast(self, n: dict, cname: str) -> None:
        """A conversion between float32 and a half-precision dtype the writer handles becomes a `cast` primitive:
        widening is exact, narrowing rounds (the primitive's dtype says to what). Anything else stays in PyTorch."""
        name = n["name"]
        args, kwargs = list(n.get("args", [])), dict(n.get("kwargs", {}))
        what = (FLOAT,) + self.halves
        if not self.halves:
            raise Unsupported("dtype conversions stay in PyTorch (this target's kernels hold float32 only)")
        extra = args[1:] + [v for k, v in kwargs.items() if k not in ("copy", "non_blocking")]
        if cname not in ("float", "half", "bfloat16", "to", "type", "_to_copy") or not args or len(extra) > 1 or \
                any(not (isinstance(a, dict) and set(a) == {"dtype"}) for a in extra):
            raise Unsupported("conversions other than to a dtype (device, memory format, like a tensor) stay in "
                              "PyTorch")
        src, out = self.val(args[0]), self.values[name]
        if not src.is_tensor or src.dtype not in what + ("bool",) or out.dtype not in what or \
                tuple(src.shape) != out.shape:
            raise Unsupported(f"conversion from {src.dtype or 'a non-tensor'} to {out.dtype} (the kernels convert "
                              f"between {', '.join(what)}, and from bool)")
        if src.dtype == out.dtype:
            raise Unsupported("a conversion to the dtype it already has returns its input; it stays in PyTorch")
        self.items.append(Prim(name, "cast", [self.tensor_operand(args[0], "a converted value")], out.shape,
                               out.dtype, name, label=cname))
        self.counted[name] = "kernel"

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


def lower(desc: dict, conservative: bool = False, fuse_cat: bool = True, halves: tuple = (),
          columns: bool = False) -> Lowered:
    lowered = Lowerer(desc, conservative, fuse_cat, halves, columns).lower()
    merge_duplicates(lowered)
    return lowered
