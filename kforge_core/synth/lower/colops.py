"""Lowering the column operators: reductions and row operators over a block of dims that is not the last one,
scans (cumsum / cumprod, reversed through `flip`), and training-mode BatchNorm's batch statistics.

Each becomes one `ColOp`: a kernel of its own over its input viewed as (O, R, I) — the dims before the block, the
block, the dims after it — in which one thread (one SIMD lane on the CPU) owns an output column (o, i) and walks R
with stride I, so consecutive threads read consecutive addresses and nothing is transposed first. The writers are
`backends/columns` (C++ and CUDA) and `backends/columns_triton`; a writer without them (`Backend.column_kernels`
False: Metal) keeps the row kernels over a transposing copy (`rowops._to_trailing`).

Training-mode BatchNorm is a `bnstats` ColOp (per channel: mean and biased variance over N and the spatial dims,
two passes) feeding the usual per-channel elementwise chain; the running statistics are updated as PyTorch does
(momentum or the cumulative average, the unbiased variance) by a host helper on the (C,) buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from .args import Arg
from .ir import FLOAT, Prim, Py, Unsupported, Value

SCAN_OPS = {"cumsum": "sum", "cumprod": "prod"}
BN_MODULES = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")


@dataclass
class ColOp(Py):
    """One column kernel: its input `x` (a value name) viewed as (O, R, I) with R the dims [lo, hi)."""

    kind: str = ""  # reduce | softmax | log_softmax | logsumexp | argmax | argmin | scan | bnstats | pool
    op: str = ""  # reduce: sum | mean | max | min; scan: sum | prod
    x: str = ""
    lo: int = 0
    hi: int = 0
    keepdim: bool = False
    reverse: bool = False  # a scan from the end of the dim (cumsum of a flip, flipped back)
    kname: str = ""  # the kernel's name in the source, set by the plan (kf_c0, kf_c1, ...)
    # pool: the window (`lower.pooling`): {"op": max|avg, "k", "s", "p", "dil": per pooled dim, "ceil",
    # "include_pad", "divisor"}; x is (lead..., pooled dims), the pooled dims the last len(k)
    pool: dict | None = None
    # elementwise primitives fused into the kernel (`plan.col_fusion`): `pre` applied to every element read, in
    # order (the first reads x), `post` to every value written (the first reads the kernel's own result)
    pre: list = field(default_factory=list)
    post: list = field(default_factory=list)
    # tensors the chains read besides the chain value, one value per row: of a window kernel's (B, ...) view (its
    # lead dims as one), of a column kernel's (O, R, I) view its (o, r) (constant along I): a per-channel bias
    aux: list = field(default_factory=list)

    @property
    def out_dtype(self) -> str:
        return "int64" if self.kind in ("argmax", "argmin") else FLOAT

    @property
    def same_shape(self) -> bool:
        """Its output has its input's shape (else the R block is reduced away, or kept as 1s)."""
        return self.kind in ("softmax", "log_softmax", "scan")


def bn_module_canon(mod: dict, target: str, args: list, param_ref, modules: dict) -> tuple[str, dict]:
    """A BatchNorm<n>d module call as the `batch_norm` operator, with its buffers and mode."""
    a = mod.get("attrs", {})
    have = {p["name"] for p in modules.get(target, {}).get("params", []) + modules.get(target, {}).get("buffers", [])}

    def ref(key):
        return param_ref(f"{target}.{key}") if key in have else None

    return "batch_norm", {"input": args[0] if args else None, "running_mean": ref("running_mean"),
                          "running_var": ref("running_var"), "weight": ref("weight"), "bias": ref("bias"),
                          "num_batches_tracked": ref("num_batches_tracked"),
                          "training": bool(mod.get("training", True)), "momentum": a.get("momentum", 0.1),
                          "eps": a.get("eps", 1e-5)}


class ColumnLowering:
    """Mixed into `Lowerer`: uses its `values`, `items`, `counted`, `labels`, `names`, `syn`, `_tmp`, `columns`,
    `conservative`, `canon`, `nodes`, `users` and `dropped`."""

    def _column_block(self, shape: tuple, dims: list[int]) -> bool:
        """Whether a column kernel takes these reduced dims: one block of consecutive dims, not the last ones
        (those the row kernels reduce in place), on a writer with column kernels."""
        nd = len(shape)
        return bool(self.columns and dims and dims == list(range(dims[0], dims[-1] + 1))
                    and dims[-1] != nd - 1)

    def _col(self, name: str, kind: str, x: tuple, lo: int, hi: int, origin: str, label: str, op: str = "",
             keepdim: bool = False, reverse: bool = False) -> None:
        xv = self.values[x[1]]
        if xv.dtype != FLOAT:
            raise Unsupported(f"{label} of {xv.dtype}")
        out = self.values[name]
        self.items.append(ColOp(name, "", [x[1]], out, "colk", origin, label=label, kind=kind, op=op, x=x[1],
                                lo=lo, hi=hi, keepdim=keepdim, reverse=reverse))
        self.counted[origin] = "kernel"
        self.labels[origin] = label

    # --- scans ---------------------------------------------------------------------------------------
    def _scan_prepass(self) -> None:
        """flip(cumsum(flip(x, d), d), d), each flip used once: one reversed scan of x (no flips)."""
        for n in self.nodes:
            if n["op"] not in ("call_function", "call_method"):
                continue
            try:
                name, b = self.canon(n)
            except Exception:  # noqa: BLE001
                continue
            if name not in SCAN_OPS or not Arg.is_node(b.get("input")):
                continue
            inner = self.by_name.get(b["input"]["n"])
            users = self.users.get(n["name"], [])
            outer = self.by_name.get(users[0]) if len(users) == 1 else None
            if inner is None or outer is None or self.users.get(inner["name"]) != [n["name"]]:
                continue
            d = self._scan_dim(n, b)
            if d is None or self._flip_dim(inner) != d or self._flip_dim(outer) != d:
                continue
            self.dropped |= {inner["name"], n["name"]}
            outer["_reverse_scan"] = (n, inner)

    def _flip_dim(self, n: dict) -> int | None:
        """The one dim a `flip` node flips (normalized), else None."""
        try:
            name, b = self.canon(n)
        except Exception:  # noqa: BLE001
            return None
        if name != "flip" or not Arg.is_node(b.get("input")):
            return None
        dims = Arg.const(b.get("dims", b.get("arg1")))
        if len(n.get("args", [])) > 2:  # x.flip(1, 2): several dims as positional arguments
            return None
        dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
        nd = len(self.values[b["input"]["n"]].shape)
        if len(dims) != 1 or not isinstance(dims[0], int) or not nd:
            return None
        return dims[0] % nd

    def _scan_dim(self, n: dict, b: dict) -> int | None:
        d = Arg.const(b.get("dim", b.get("arg1")))
        x = self.values.get(b["input"]["n"]) if Arg.is_node(b.get("input")) else None
        if not isinstance(d, int) or isinstance(d, bool) or x is None or not x.shape:
            return None
        return d % len(x.shape)

    def _scan(self, n: dict, cname: str, b: dict, reverse: bool = False, name: str | None = None) -> None:
        """cumsum / cumprod along one dim: a row scan along the last dim, a column scan along another."""
        name = name or n["name"]
        if not self.columns:
            raise Unsupported(f"{cname}: this target's writer has no scan kernels")
        if self.conservative:
            raise Unsupported("scans kept in PyTorch in the conservative variant")
        if b.get("dtype") is not None:
            raise Unsupported(f"{cname} with dtype=")
        x = self.tensor_operand(b.get("input"), f"the {cname} input")
        xv = self.values[x[1]]
        d = self._scan_dim(n, b)
        if d is None:
            raise Unsupported(f"{cname} over dim {b.get('dim', b.get('arg1'))!r}")
        if xv.dtype != FLOAT or self.values[name].dtype != FLOAT:
            raise Unsupported(f"{cname} of {xv.dtype} (the scan kernels hold float32)")
        self._col(name, "scan", x, d, d + 1, name, cname, op=SCAN_OPS[cname], reverse=reverse)

    def _reverse_scan(self, n: dict) -> None:
        scan, _flip = n["_reverse_scan"]
        cname, b = self.canon(scan)
        _, fb = self.canon(_flip)
        self.labels[n["name"]] = f"reversed {cname}"
        try:
            self._scan(scan, cname, dict(b, input=fb["input"]), reverse=True, name=n["name"])
        except Unsupported as e:
            raise Unsupported(f"reversed {cname}: {e}") from None

    # --- training-mode batch norm -----------------------------------------------------------------------
    def _batch_norm_train(self, name: str, b: dict, x: tuple, xv: Value) -> None:
        """BatchNorm with batch statistics: a `bnstats` column kernel, then (x - mean) * rsqrt(var + eps) * w + b
        per channel in one elementwise kernel (what follows fuses into it)."""
        if not self.columns:
            raise Unsupported("batch_norm in training mode: this target's writer has no column kernels")
        S = tuple(xv.shape)
        if len(S) < 2 or prod(S) == 0:
            raise Unsupported("batch_norm of a rank<2 or empty tensor")
        N, C = S[0], S[1]
        count = prod(S) // C
        if count <= 1:
            raise Unsupported("batch_norm in training mode over one value per channel (PyTorch raises)")
        eps = float(Arg.const(b.get("eps", 1e-5)))
        nd = len(S)
        cshape = (C,) + (1,) * (nd - 2)

        def operand(key):
            a = b.get(key)
            if a is None or a == {"n": None}:
                return None
            t = self.tensor_operand(a, key)
            if self.values[t[1]].shape != (C,) or self.values[t[1]].dtype != FLOAT:
                raise Unsupported(f"batch_norm {key} must be float32 of shape ({C},)")
            return t

        rm, rv, w, bias = (operand(k) for k in ("running_mean", "running_var", "weight", "bias"))
        # the step counter is an int64 buffer only the host-side update reads
        nbt = b.get("num_batches_tracked")
        nbt = ("v", nbt["n"]) if Arg.is_node(nbt) and self.values.get(nbt["n"], Value("x")).is_tensor else None
        stats = self._tmp(f"{name}_stats", (2, C))
        self.items.append(ColOp(stats, "", [x[1]], self.values[stats], "colk", name, label="batch_norm",
                                kind="bnstats", x=x[1], lo=1, hi=2))
        sn = self.names[stats]
        view = f"({C},)" if nd == 2 else f"({C}{', 1' * (nd - 2)})"
        mean_c = self._tmp(f"{name}_mean", cshape)
        if rm is not None and rv is not None:
            # the running statistics as PyTorch updates them; the mean is returned so the update is live
            mom = Arg.const(b.get("momentum", 0.1))
            code = (f"kf_bn_update({self.names[rm[1]]}, {self.names[rv[1]]}, "
                    f"{self.names[nbt[1]] if nbt is not None else 'None'}, {sn}, {count}, "
                    f"{'None' if mom is None else float(mom)}).view{view}")
            deps = [stats, rm[1], rv[1]] + ([nbt[1]] if nbt is not None else [])
        else:
            code, deps = f"{sn}[0].view{view}", [stats]
        self.items.append(Py(mean_c, code, deps, self.values[mean_c], "glue", name))
        var_c = self._tmp(f"{name}_var", cshape)
        self.items.append(Py(var_c, f"{sn}[1].view{view}", [stats], self.values[var_c], "glue", name))
        steps = []
        for key, t in (("weight", w), ("bias", bias)):
            if t is not None:
                rn = self._tmp(f"{name}_{key}", cshape)
                self.items.append(Py(rn, f"{self.names[t[1]]}.view{view}", [t[1]], self.values[rn], "glue", name))
                steps.append(("mul" if key == "weight" else "add", ("v", rn)))

        def pw(fn, ops, shape, nm=None):
            nm = nm or self._tmp(f"{name}_{fn}", shape)
            self.items.append(Prim(nm, fn, ops, tuple(shape), FLOAT, name, {}, label="batch_norm"))
            return ("v", nm)

        inv = pw("rsqrt", [pw("add", [("v", var_c), ("c", eps)], cshape)], cshape)
        y = pw("mul", [pw("sub", [x, ("v", mean_c)], S), inv], S, nm=None if steps else name)
        for i, (fn, o) in enumerate(steps):
            y = pw(fn, [y, o], S, nm=name if i == len(steps) - 1 else None)
        self.counted[name] = "kernel"
        self.labels[name] = "batch_norm"
