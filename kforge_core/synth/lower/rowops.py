"""Lowering reductions and row operators to `red` and elementwise primitives over the trailing dimensions.

The row kernels reduce only over a suffix of the dimensions, so every reduction checks that its dims are the last
`k`. Composite operators (softmax, log_softmax, logsumexp, layer_norm, rms_norm, normalize, norm, var, std,
eval-mode batch_norm, group_norm) expand into reductions and elementwise steps that share the node's name as
`origin`.
"""

from __future__ import annotations

from math import prod

from .args import Arg
from .ir import FLOAT, Prim, Py, Unsupported, Value, contig_strides


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
        S = xv.shape
        if cname == "group_norm":
            self._group_norm(name, b, x, xv)
            return
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
            dim = Arg.const(b.get("dim")) if b.get("dim") is not None else None
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
                # one division per row, a multiply per element: the sum is at least 1 (it holds exp(0)), so 1/sum
                # neither overflows nor underflows, and x * (1/sum) is within about 1.5 ulps of x / sum. A float
                # division is about ten instructions on a GPU; softmax over 32768-wide rows went from 67 to 77 % of
                # the measured bandwidth on an H200
                inv = pw("div", [("c", 1.0), s], shape=self.values[s[1]].shape)
                pw("mul", [e, inv], nm=name)
            else:
                ls = pw("log", [s], shape=self.values[s[1]].shape)
                pw("sub", [d, ls], nm=name)
        elif cname == "logsumexp":
            k = self._dims_k(S, Arg.const(b.get("dim")))
            keep = bool(Arg.const(b.get("keepdim", False)))
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
            ns = Arg.const(b.get("normalized_shape"))
            ns = tuple(ns) if isinstance(ns, (list, tuple)) else (ns,)
            k = len(ns)
            if tuple(S[len(S) - k:]) != tuple(ns):
                raise Unsupported(f"{cname} normalized_shape {ns} does not match the input's trailing dims")
            eps = b.get("eps")
            eps = Arg.const(eps) if eps is not None else (1e-5 if cname == "layer_norm" else None)
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
            p = Arg.const(b.get("p", 2.0 if cname == "normalize" else "fro"))
            if p not in (2, 2.0, "fro") or p is None:
                raise Unsupported(f"{cname} with p={p!r}")
            dim = Arg.const(b.get("dim", 1 if cname == "normalize" else None))
            k = self._dims_k(S, dim)
            if cname == "normalize":
                eps = float(Arg.const(b.get("eps", 1e-12)))
                if b.get("out") not in (None,):
                    raise Unsupported("normalize(out=...)")
                s = red("sum", pw("mul", [x, x]))
                rs = self.values[s[1]].shape
                nrm = pw("clamp_min", [pw("sqrt", [s], shape=rs), ("c", eps)], shape=rs)
                pw("div", [x, nrm], nm=name)
            else:
                if b.get("dtype") is not None:
                    raise Unsupported("norm with dtype=")
                keep = bool(Arg.const(b.get("keepdim", False)))
                s = red("sum", pw("mul", [x, x]), keep=keep)
                pw("sqrt", [s], shape=out.shape, nm=name)
        elif cname in ("var", "std"):
            dim = Arg.const(b.get("dim")) if b.get("dim") is not None else None
            k = self._dims_k(S, dim)
            corr = 1
            if b.get("unbiased") is not None:
                ub = Arg.const(b["unbiased"])
                if not isinstance(ub, bool):
                    raise Unsupported("var/std with a non-bool unbiased")
                corr = 1 if ub else 0
            if b.get("correction") is not None:
                corr = Arg.const(b["correction"])
            keep = bool(Arg.const(b.get("keepdim", False)))
            mu = red("mean", x)
            d = pw("sub", [x, mu])
            ss = red("sum", pw("mul", [d, d]), keep=keep)
            v = pw("div", [ss, ("cols", corr)], shape=out.shape, nm=None if cname == "std" else name)
            if cname == "std":
                pw("sqrt", [v], shape=out.shape, nm=name)
        elif cname == "batch_norm":
            training = Arg.const(b.get("training", False))
            if training is not False:
                raise Unsupported("batch_norm in training mode (batch statistics) stays in PyTorch")
            nd = len(S)
            if nd < 2:
                raise Unsupported("batch_norm of a rank<2 tensor")
            eps = float(Arg.const(b.get("eps", 1e-5)))
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
                self.values[rname] = Value("t", cshape, FLOAT, contig_strides(cshape), True)
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
