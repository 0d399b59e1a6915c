"""The kernel templates of the composite row operators: one small function per operator, looked up by name in
`ROW_TEMPLATES` (`RowOpLowering._row_op` dispatches). Each expands its operator into reductions over the trailing
dims and elementwise steps through a `RowOp` (which collects them, all sharing the node's name as `origin`); the
node's own value is the step named after it.
"""

from __future__ import annotations

from .args import Arg
from .ir import FLOAT, Prim, Py, Unsupported, Value, contig_strides


class RowOp:
    """The lowering of one row-operator node: its name, operator, input shape `S`, the trailing dims a reduction
    covers (`k`, set by the template before its first `red`) and the primitives made so far (`items`)."""

    def __init__(self, lw, name: str, cname: str, S: tuple):
        self.lw, self.name, self.cname, self.S = lw, name, cname, S
        self.k = 0
        self.items: list[Prim] = []

    def red(self, op: str, src: tuple, keep: bool = True, nm: str | None = None) -> tuple:
        S, k = self.S, self.k
        nm = nm or self.lw._tmp(f"{self.name}_{op}", tuple(S[:len(S) - k]) + ((1,) * k if keep else ()))
        self.items.append(self.lw._red(nm, op, src, S, k, keep, self.name, label=self.cname))
        return ("v", nm)

    def pw(self, fn: str, ops: list, shape=None, nm: str | None = None, **attrs) -> tuple:
        shape = tuple(shape if shape is not None else self.S)
        nm = nm or self.lw._tmp(f"{self.name}_{fn}", shape)
        self.items.append(Prim(nm, fn, ops, shape, FLOAT, self.name, attrs, label=self.cname))
        return ("v", nm)

    def shape(self, v: tuple) -> tuple:
        return self.lw.values[v[1]].shape


def _softmax(r: RowOp, b: dict, x: tuple, out: Value) -> None:
    if b.get("dtype") is not None:
        raise Unsupported(f"{r.cname} with dtype=")
    dim = Arg.const(b.get("dim")) if b.get("dim") is not None else None
    if dim is None:
        raise Unsupported(f"{r.cname} without dim")
    r.k = r.lw._dims_k(r.S, dim)
    if r.k != 1:
        raise Unsupported(f"{r.cname} over several dims")
    m = r.red("max", x)
    d = r.pw("sub", [x, m])
    e = r.pw("exp", [d])
    s = r.red("sum", e)
    if r.cname == "softmax":
        # one division per row, a multiply per element: the sum is at least 1 (it holds exp(0)), so 1/sum neither
        # overflows nor underflows, and x * (1/sum) is within about 1.5 ulps of x / sum. A float division is about
        # ten instructions on a GPU (docs/PERF_NOTES.md)
        inv = r.pw("div", [("c", 1.0), s], shape=r.shape(s))
        r.pw("mul", [e, inv], nm=r.name)
    else:
        ls = r.pw("log", [s], shape=r.shape(s))
        r.pw("sub", [d, ls], nm=r.name)


def _logsumexp(r: RowOp, b: dict, x: tuple, out: Value) -> None:
    r.k = r.lw._dims_k(r.S, Arg.const(b.get("dim")))
    keep = bool(Arg.const(b.get("keepdim", False)))
    m = r.red("max", x)
    e = r.pw("exp", [r.pw("sub", [x, m])])
    if keep:
        s = r.red("sum", e)
        rs = r.shape(s)
        r.pw("add", [r.pw("log", [s], shape=rs), m], shape=rs, nm=r.name)
    else:
        s = r.red("sum", e, keep=False)
        m2 = r.red("max", x, keep=False)
        r.pw("add", [r.pw("log", [s], shape=out.shape), m2], shape=out.shape, nm=r.name)


def _affine_operand(r: RowOp, b: dict, key: str) -> tuple | None:
    a = b.get(key)
    return None if a is None or a == {"n": None} else r.lw.tensor_operand(a, key)


def _layer_norm(r: RowOp, b: dict, x: tuple, out: Value) -> None:
    """layer_norm and rms_norm over the trailing `normalized_shape`, with optional weight (and bias)."""
    cname, S = r.cname, r.S
    ns = Arg.const(b.get("normalized_shape"))
    ns = tuple(ns) if isinstance(ns, (list, tuple)) else (ns,)
    r.k = k = len(ns)
    if tuple(S[len(S) - k:]) != tuple(ns):
        raise Unsupported(f"{cname} normalized_shape {ns} does not match the input's trailing dims")
    eps = b.get("eps")
    eps = Arg.const(eps) if eps is not None else (1e-5 if cname == "layer_norm" else None)
    if eps is None:
        eps = 1.1920928955078125e-07  # torch.finfo(torch.float32).eps, rms_norm's default
    w = _affine_operand(r, b, "weight")
    bias = _affine_operand(r, b, "bias") if cname == "layer_norm" else None
    for t in (w, bias):
        if t is not None and (r.lw.values[t[1]].dtype != FLOAT or r.lw.values[t[1]].shape != ns):
            raise Unsupported(f"{cname} affine parameters must be float32 of shape {ns}")
    rs = tuple(S[:len(S) - k]) + (1,) * k
    if cname == "layer_norm":
        mu = r.red("mean", x)
        d = r.pw("sub", [x, mu])
        var = r.red("mean", r.pw("mul", [d, d]))
        inv = r.pw("rsqrt", [r.pw("add", [var, ("c", eps)], shape=rs)], shape=rs)
        steps = [("mul", [d, inv])]
    else:
        ms = r.red("mean", r.pw("mul", [x, x]))
        inv = r.pw("rsqrt", [r.pw("add", [ms, ("c", eps)], shape=rs)], shape=rs)
        steps = [("mul", [x, inv])]
    if w is not None:
        steps.append(("mul", [None, w]))
    if bias is not None:
        steps.append(("add", [None, bias]))
    last = None
    for i, (fn, ops) in enumerate(steps):
        ops = [last if o is None else o for o in ops]
        last = r.pw(fn, ops, nm=r.name if i == len(steps) - 1 else None)


def _norm(r: RowOp, b: dict, x: tuple, out: Value) -> None:
    """normalize (x / max(||x||, eps)) and norm (the 2-norm itself)."""
    cname = r.cname
    p = Arg.const(b.get("p", 2.0 if cname == "normalize" else "fro"))
    if p not in (2, 2.0, "fro") or p is None:
        raise Unsupported(f"{cname} with p={p!r}")
    dim = Arg.const(b.get("dim", 1 if cname == "normalize" else None))
    r.k = r.lw._dims_k(r.S, dim)
    if cname == "normalize":
        eps = float(Arg.const(b.get("eps", 1e-12)))
        if b.get("out") not in (None,):
            raise Unsupported("normalize(out=...)")
        s = r.red("sum", r.pw("mul", [x, x]))
        rs = r.shape(s)
        nrm = r.pw("clamp_min", [r.pw("sqrt", [s], shape=rs), ("c", eps)], shape=rs)
        r.pw("div", [x, nrm], nm=r.name)
    else:
        if b.get("dtype") is not None:
            raise Unsupported("norm with dtype=")
        keep = bool(Arg.const(b.get("keepdim", False)))
        s = r.red("sum", r.pw("mul", [x, x]), keep=keep)
        r.pw("sqrt", [s], shape=out.shape, nm=r.name)


def _var(r: RowOp, b: dict, x: tuple, out: Value) -> None:
    """var and std with a correction (unbiased= or correction=)."""
    dim = Arg.const(b.get("dim")) if b.get("dim") is not None else None
    r.k = r.lw._dims_k(r.S, dim)
    corr = 1
    if b.get("unbiased") is not None:
        ub = Arg.const(b["unbiased"])
        if not isinstance(ub, bool):
            raise Unsupported("var/std with a non-bool unbiased")
        corr = 1 if ub else 0
    if b.get("correction") is not None:
        corr = Arg.const(b["correction"])
    keep = bool(Arg.const(b.get("keepdim", False)))
    mu = r.red("mean", x)
    d = r.pw("sub", [x, mu])
    ss = r.red("sum", r.pw("mul", [d, d]), keep=keep)
    v = r.pw("div", [ss, ("cols", corr)], shape=out.shape, nm=None if r.cname == "std" else r.name)
    if r.cname == "std":
        r.pw("sqrt", [v], shape=out.shape, nm=r.name)


def _batch_norm(r: RowOp, b: dict, x: tuple, out: Value) -> bool:
    """Eval-mode batch_norm: the running statistics and affine parameters as per-channel glue views, one
    elementwise chain. Adds its own items (glue first) and returns True."""
    lw, name, S = r.lw, r.name, r.S
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
        t = _affine_operand(r, b, key)
        if t is None:
            chans[key] = None
            continue
        tv = lw.values[t[1]]
        if tv.dtype != FLOAT or tv.shape != (C,):
            raise Unsupported(f"batch_norm {key} must be float32 of shape ({C},)")
        rname = lw.syn(f"{name}_{key}")
        lw.values[rname] = Value("t", cshape, FLOAT, contig_strides(cshape), True)
        code = f"{lw.names[t[1]]}.reshape({', '.join(['-1'] + ['1'] * (nd - 2))}{',' if nd == 2 else ''})"
        glue.append(Py(rname, code, [t[1]], lw.values[rname], "glue", name))
        chans[key] = ("v", rname)
    if chans["running_mean"] is None or chans["running_var"] is None:
        raise Unsupported("batch_norm without running statistics")
    lw.counted[name] = "kernel"
    inv = r.pw("rsqrt", [r.pw("add", [chans["running_var"], ("c", eps)], shape=cshape)], shape=cshape)
    y = r.pw("mul", [r.pw("sub", [x, chans["running_mean"]]), inv])
    steps = []
    if chans["weight"] is not None:
        steps.append(("mul", chans["weight"]))
    if chans["bias"] is not None:
        steps.append(("add", chans["bias"]))
    if not steps:
        r.items[-1].name = name
        lw.values[name] = out
    for i, (fn, o) in enumerate(steps):
        y = r.pw(fn, [y, o], nm=name if i == len(steps) - 1 else None)
    for it in r.items:
        it.label = "batch_norm"
    lw.items.extend(glue)
    lw.items.extend(r.items)
    lw.labels[name] = "batch_norm"
    return True


# operator -> template; a template returning True has added its items itself (batch_norm: glue before them)
ROW_TEMPLATES = {"softmax": _softmax, "log_softmax": _softmax, "logsumexp": _logsumexp, "layer_norm": _layer_norm,
                 "rms_norm": _layer_norm, "normalize": _norm, "norm": _norm, "var": _var, "std": _var,
                 "batch_norm": _batch_norm}
