"""Lowering reductions and row operators to `red` and elementwise primitives over the trailing dimensions.

The row kernels reduce only over a suffix of the dimensions, so every reduction checks that its dims are the last
`k`. Composite operators (softmax, log_softmax, logsumexp, layer_norm, rms_norm, normalize, norm, var, std,
eval-mode batch_norm: the templates of `row_templates`; group_norm, here) expand into reductions and elementwise
steps that share the node's name as `origin`.
"""

from __future__ import annotations

from math import prod

from .args import Arg
from .ir import FLOAT, Prim, Py, Unsupported, Value, contig_strides
from .row_templates import ROW_TEMPLATES, RowOp


class RowOpLowering:
    """Mixed into `Lowerer`: uses its `values`, `items`, `counted`, `labels`, `names`, `syn` and `tensor_operand`."""

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
            self.values[name] = Value("t", shape, FLOAT, contig_strides(shape), True)
        return Prim(name, "red", [x], shape, FLOAT, origin, red={"op": op, "k": k, "keepdim": keepdim,
                                                                  "in_shape": tuple(in_shape)}, label=label)

    def _tmp(self, base: str, shape: tuple, dtype: str = FLOAT) -> str:
        t = self.syn(base)
        self.values[t] = Value("t", tuple(shape), dtype, contig_strides(shape), True)
        return t

    def _reduction(self, name: str, fn: str, b: dict, name_override: str, origin: str, label: str) -> None:
        x, xv = self._input(b)
        k = self._dims_k(xv.shape, Arg.const(b.get("dim")) if b.get("dim") is not None else None)
        keepdim = bool(Arg.const(b.get("keepdim", False)) or False)
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
        if cname == "group_norm":
            self._group_norm(name, b, x, xv)
            return
        template = ROW_TEMPLATES.get(cname)
        if template is None:
            raise Unsupported(f"no kernel template for {cname}")
        r = RowOp(self, name, cname, xv.shape)
        if template(r, b, x, out):
            return  # it added its items itself
        final = next((it for it in r.items if it.name == name), None)
        if final is None or self.values[name].shape != final.shape:
            raise Unsupported(f"{cname}: synthesized shape {final.shape if final else None} differs from the traced "
                              f"{self.values[name].shape}")
        self.items.extend(r.items)
        self.counted[name] = "kernel"
        self.labels[name] = cname

    def _group_norm(self, name: str, b: dict, x: tuple, xv: Value) -> None:
        """GroupNorm over x of shape (N, C, *spatial), the same in training and eval mode (no running stats).

        A row kernel reduces x viewed as (N, G, C/G * prod(spatial)) to the per-group mean and 1/sqrt(var + eps)
        (biased variance, two passes); glue views spread those (N, G, 1) statistics to per-channel (N, C, 1, ...)
        tensors, and one elementwise kernel over x applies (x - mean) * (rstd * weight) + bias, so the ops that
        follow (an activation) fuse into it. The big tensor is read by the statistics passes and once more by the
        elementwise kernel, and written once. The pieces are recorded in `pipelines`: the CUDA writer may fold the
        statistics into the elementwise kernel (`cuda_pipeline`), which then reads the tensor from memory once.
        """
        S = tuple(xv.shape)
        nd = len(S)
        if nd < 2:
            raise Unsupported("group_norm of a rank<2 tensor")
        G = Arg.const(b.get("num_groups"))
        if isinstance(G, bool) or not isinstance(G, int) or G <= 0 or S[1] % G:
            raise Unsupported(f"group_norm with num_groups={G!r} for {S[1]} channels")
        eps = b.get("eps")
        eps = float(Arg.const(eps)) if eps is not None and Arg.const(eps) is not None else 1e-5
        N, C = S[0], S[1]
        cg, sp = C // G, nd - 2
        M = cg * prod(S[2:])
        if N * M == 0:
            raise Unsupported("group_norm of an empty tensor")
        if tuple(self.values[name].shape) != S:
            raise Unsupported(f"group_norm: input shape {S} differs from the traced output {self.values[name].shape}")
        ones = ", 1" * sp
        cshape, sshape = (C,) + (1,) * sp, (N, C) + (1,) * sp

        def glue(base: str, shape: tuple, code: str, deps: list) -> tuple:
            nm = self._tmp(f"{name}_{base}", shape)
            self.items.append(Py(nm, code, deps, self.values[nm], "glue", name))
            return ("v", nm)

        def pw(fn, ops, shape, nm=None):
            nm = nm or self._tmp(f"{name}_{fn}", shape)
            self.items.append(Prim(nm, fn, ops, tuple(shape), FLOAT, name, {}, label="group_norm"))
            return ("v", nm)

        def red(src, shape):
            nm = self._tmp(f"{name}_mean", (N, G, 1))
            self.items.append(self._red(nm, "mean", src, shape, 1, True, name, label="group_norm"))
            return ("v", nm)

        affine = {}
        for key in ("weight", "bias"):
            a = b.get(key)
            if a is None or a == {"n": None}:
                continue
            t = self.tensor_operand(a, key)
            tv = self.values[t[1]]
            if tv.dtype != FLOAT or tuple(tv.shape) != (C,):
                raise Unsupported(f"group_norm {key} must be float32 of shape ({C},)")
            affine[key] = t
        xn = self.names[x[1]]
        src = xn if xv.contiguous else f"{xn}.contiguous()"
        xg = glue("groups", (N, G, M), f"{src}.view({xn}.shape[0], {G}, -1)", [x[1]])
        gs = (N, G, M)
        mu = red(xg, gs)
        d = pw("sub", [xg, mu], gs)
        var = red(pw("mul", [d, d], gs), gs)
        inv = pw("rsqrt", [pw("add", [var, ("c", eps)], (N, G, 1))], (N, G, 1))
        chans = {}
        for key, st in (("mean", mu), ("rstd", inv)):
            sn = self.names[st[1]]
            chans[key] = glue(key, sshape, f"{sn}.expand(-1, -1, {cg}).reshape({sn}.shape[0], {C}{ones})",
                              [st[1]])
        for key, t in affine.items():
            chans[key] = glue(key, cshape, f"{self.names[t[1]]}.reshape({C}{ones})", [t[1]])
        scale = chans["rstd"] if "weight" not in affine else pw("mul", [chans["rstd"], chans["weight"]], sshape)
        cen = pw("sub", [x, chans["mean"]], S)
        y = pw("mul", [cen, scale], S, nm=None if "bias" in affine else name)
        if "bias" in affine:
            pw("add", [y, chans["bias"]], S, nm=name)
        self.pipelines.append({"kind": "group_norm", "x": x[1], "mean": mu[1], "rstd": inv[1],
                               "mean_rows": chans["mean"][1], "rstd_rows": chans["rstd"][1], "per_row": cg,
                               "eps": eps})
        self.counted[name] = "kernel"
        self.labels[name] = "group_norm"
