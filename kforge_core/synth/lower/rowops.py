"""Lowering reductions and row operators to `red` and elementwise primitives over the trailing dimensions.

The row kernels reduce only over a suffix of the dimensions. A reduction (or softmax, log_softmax, logsumexp,
argmax/argmin) over one block of other dims is a column kernel where the writer has them (`colops`); otherwise, or
over scattered dims, it reads a permuted view of its input (`_to_trailing`); the composite operators check that
their dims are the last `k`. Composite operators
(softmax, log_softmax, logsumexp, layer_norm, rms_norm, normalize, norm, var, std, eval-mode batch_norm: the
templates of `row_templates`; group_norm, here) expand into reductions and elementwise steps that share the node's
name as `origin`.
"""

from __future__ import annotations

from math import prod

from .args import Arg
from .ir import FLOAT, Prim, Py, Unsupported, Value, contig_strides
from .row_templates import ROW_TEMPLATES, RowOp

# the start of a lowering note the generation agent passes on to the user (a candidate likely slower than eager)
SLOW_NOTE = "likely slower than eager"

# composite row operators over one dim that may be any dim (the row kernel reads a view with it moved last)
MOVABLE = ("softmax", "log_softmax", "logsumexp")


class RowOpLowering:
    """Mixed into `Lowerer`: uses its `values`, `items`, `counted`, `labels`, `names`, `syn` and `tensor_operand`."""

    def _dims_k(self, x_shape: tuple, dim) -> int:
        """Number of trailing dimensions reduced; raises Unsupported unless `dim` is a suffix of the dims."""
        nd = len(x_shape)
        norm = self._reduced_dims(x_shape, dim)
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

    @staticmethod
    def _reduced_dims(x_shape: tuple, dim) -> list[int]:
        nd = len(x_shape)
        if dim is None or dim == [] or dim == ():
            return list(range(nd))
        dims = dim if isinstance(dim, (list, tuple)) else [dim]
        try:
            return sorted({int(d) % nd for d in dims}) if nd else []
        except (TypeError, ValueError):
            raise Unsupported(f"reduction over dims {dim!r}") from None

    def _to_trailing(self, x: tuple, xv: Value, dims: list[int], origin: str) -> tuple[tuple, Value]:
        """x with the reduced `dims` moved last (a permuted view, glue), so a row kernel reduces them; its rows are
        the kept dims in their order, which is the reduction's own output order. The view is strided along the
        row, so the kernel's operand set-up (`kf_prep`) reads it through one contiguous copy."""
        nd = len(xv.shape)
        perm = [d for d in range(nd) if d not in dims] + list(dims)
        if perm == list(range(nd)):
            return x, xv
        shape = tuple(xv.shape[d] for d in perm)
        strides = tuple(xv.strides[d] for d in perm) if xv.strides else None
        note = (f"{SLOW_NOTE}: {self.labels.get(origin) or 'a reduction'} over dim(s) {dims} reads its input "
                f"through a transposing copy (the row kernels reduce trailing dims), likely slower than PyTorch's own")
        if note not in self.notes:
            self.notes.append(note)
        t = self.syn(f"{origin}_moved")
        self.values[t] = Value("t", shape, xv.dtype, strides, False)
        self.items.append(Py(t, f"{self.names[x[1]]}.permute({', '.join(map(str, perm))})", [x[1]], self.values[t],
                             "glue", origin))
        return ("v", t), self.values[t]

    def _reduction(self, name: str, fn: str, b: dict, name_override: str, origin: str, label: str) -> None:
        """A plain reduction over any dims: trailing dims directly; others through a permuted view (the result's
        dims are the kept ones in order; keepdim=True puts the 1s back where the reduced dims were)."""
        x, xv = self._input(b)
        dims = self._reduced_dims(xv.shape, Arg.const(b.get("dim")) if b.get("dim") is not None else None)
        keepdim = bool(Arg.const(b.get("keepdim", False)) or False)
        if b.get("dtype") not in (None,):
            raise Unsupported("reduction with dtype=")
        k, S = len(dims), tuple(xv.shape)
        out_shape = tuple(self.values[name_override].shape)
        want = tuple(1 if i in dims else d for i, d in enumerate(S)) if keepdim else \
            tuple(d for i, d in enumerate(S) if i not in dims)
        if out_shape != want:
            raise Unsupported(f"unexpected reduction shape {out_shape}")
        if dims == list(range(len(S) - k, len(S))):
            self.items.append(self._red(name_override, fn, x, S, k, keepdim, origin, label=label))
        elif self._column_block(S, dims):
            self._col(name_override, "reduce", x, dims[0], dims[-1] + 1, origin, label, op=fn, keepdim=keepdim)
            return
        else:
            x, xv = self._to_trailing(x, xv, dims, origin)
            flat = self._tmp(f"{origin}_{fn}", tuple(xv.shape[:len(S) - k])) if keepdim else name_override
            self.items.append(self._red(flat, fn, x, xv.shape, k, False, origin, label=label))
            if keepdim:
                back = "".join(f".unsqueeze({d})" for d in dims)
                self.items.append(Py(name_override, f"{self.names[flat]}{back}", [flat], self.values[name_override],
                                     "glue", origin))
        self.counted[origin] = "kernel"
        self.labels[origin] = label

    def _arg_reduction(self, name: str, cname: str, b: dict) -> None:
        """argmax / argmin (int64) over one dim or all: in one row kernel, the row's max (min) and whether it holds
        a NaN in the first pass, then the smallest column index where the row equals it (PyTorch's first
        occurrence; the first NaN when there is one) in the second. Indexes are computed as floats, exact for rows
        up to 2^24 elements; the float index becomes int64 outside the kernel (one small pass over the result)."""
        x, xv = self._input(b)
        dim = Arg.const(b.get("dim")) if b.get("dim") is not None else None
        if isinstance(dim, (list, tuple)):
            raise Unsupported(f"{cname} over several dims")
        keepdim = bool(Arg.const(b.get("keepdim", False)) or False)
        S = tuple(xv.shape)
        dims = self._reduced_dims(S, dim)
        out = self.values[name]
        if out.dtype != "int64":
            raise Unsupported(f"{cname} producing {out.dtype}")
        if dim is None and keepdim:
            raise Unsupported(f"{cname} with keepdim and no dim")
        k = len(dims)
        if dim is not None and self._column_block(S, dims):
            self._col(name, cname, x, dims[0], dims[-1] + 1, name, cname, keepdim=keepdim)
            return
        if dims != list(range(len(S) - k, len(S))):
            x, xv = self._to_trailing(x, xv, dims, name)
        R = prod(xv.shape[len(S) - k:])
        if R == 0 or R > 1 << 24:
            raise Unsupported(f"{cname} over {R} elements (float indexes are exact up to 2^24)")
        shape, lead = tuple(xv.shape), tuple(xv.shape[:len(S) - k])
        rs = lead + (1,) * k
        extreme = "max" if cname == "argmax" else "min"

        def pw(fn, ops, shp, dtype=FLOAT, **attrs):
            nm = self._tmp(f"{name}_{fn}", shp, dtype)
            self.items.append(Prim(nm, fn, ops, shp, dtype, name, attrs, label=cname))
            return ("v", nm)

        def red(op, src, keep):
            nm = self._tmp(f"{name}_{op}", rs if keep else lead)
            self.items.append(self._red(nm, op, src, shape, k, keep, name, label=cname))
            return ("v", nm)

        first = {"row_k": k}
        m = red(extreme, x, True)
        nan_at = red("min", pw("where", [pw("ne", [x, x], shape, "bool"), ("col",), ("cols", 0)], shape, **first),
                     False)
        hit_at = red("min", pw("where", [pw("eq", [x, m], shape, "bool"), ("col",), ("cols", 0)], shape, **first),
                     False)
        has_nan = pw("lt", [nan_at, ("cols", 0)], lead, "bool")
        pos = pw("where", [has_nan, nan_at, hit_at], lead)
        back = "".join(f".unsqueeze({d})" for d in dims) if keepdim else ""
        self.items.append(Py(name, f"{self.names[pos[1]]}{back}.long()", [pos[1]], out, "glue", name))
        self.counted[name] = "kernel"
        self.labels[name] = cname

    def _row_op(self, n: dict, cname: str, b: dict) -> None:
        name = n["name"]
        out = self.values[name]
        if cname in ("argmax", "argmin"):
            self._arg_reduction(name, cname, b)
            return
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
        inner = name
        dim = Arg.const(b.get("dim")) if cname in MOVABLE and b.get("dim") is not None else None
        if isinstance(dim, (list, tuple)) and len(dim) == 1:
            dim = dim[0]
        if cname == "batch_norm" and (Arg.const(b.get("training", False)) is not False
                                      or b.get("running_mean") in (None, {"n": None})):
            self._batch_norm_train(name, b, x, xv)  # batch statistics: a column kernel
            return
        if isinstance(dim, int) and xv.shape and self._column_block(xv.shape, [dim % len(xv.shape)]) and \
                b.get("dtype") is None:
            d = dim % len(xv.shape)
            self._col(name, cname, x, d, d + 1, name, cname, keepdim=bool(Arg.const(b.get("keepdim", False))))
            return
        if isinstance(dim, int) and xv.shape and dim % len(xv.shape) != len(xv.shape) - 1 and \
                b.get("dtype") is None:
            # softmax / logsumexp over another dim: the row kernel works on a view with that dim last, its result
            # is moved back (a strided view: what reads it next takes it as it is or through one copy)
            x, xv = self._to_trailing(x, xv, [dim % len(xv.shape)], name)
            b = dict(b, dim=-1)
            keep = cname != "logsumexp" or bool(Arg.const(b.get("keepdim", False)))
            if keep:
                inner = self._tmp(f"{name}_moved_out", xv.shape if cname != "logsumexp" else xv.shape[:-1] + (1,))
        r = RowOp(self, inner, cname, xv.shape)
        if template(r, b, x, self.values[inner]):
            return  # it added its items itself
        final = next((it for it in r.items if it.name == inner), None)
        if final is None or self.values[inner].shape != final.shape:
            raise Unsupported(f"{cname}: synthesized shape {final.shape if final else None} differs from the traced "
                              f"{self.values[inner].shape}")
        self.items.extend(r.items)
        if inner != name:
            self.items.append(Py(name, f"{self.names[inner]}.movedim(-1, {dim % len(xv.shape)})", [inner], out,
                                 "glue", name))
            self.labels[inner] = cname
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
