"""Lowering the loss functions (`torch.nn.functional` and their `nn.*Loss` modules) to elementwise and `red`
primitives, so every writer that has row reductions writes them.

Two shapes of loss:
- elementwise losses (mse_loss, l1_loss, smooth_l1_loss, huber_loss, kl_div): one value per element of the
  (same-shaped) input and target, then reduced over all dims (`mean`, `sum`, kl_div's `batchmean`: the sum over the
  batch size) or returned as is (`none`);
- row losses (cross_entropy over the class dim, triplet_margin_loss over the feature dim): one value per row from
  reductions over the last dim, then those rows reduced (a second, small kernel) or returned (`none`).

Each term follows ATen's own formula and order of operations (`aten/src/ATen/native/Loss.cpp` and its kernels), so
the float32 results agree with PyTorch's within rounding. Anything else (weights, legacy `size_average`/`reduce`,
label smoothing, class dims other than the last, broadcasting between input and target) stays in PyTorch with the
reason.
"""

from __future__ import annotations

from .args import Arg
from .ir import FLOAT, Prim, Py, Unsupported

# the functional spellings' parameters, in order (positional calls bind to them)
LOSS_SIGS = {
    "mse_loss": ["input", "target", "size_average", "reduce", "reduction", "weight"],
    "l1_loss": ["input", "target", "size_average", "reduce", "reduction", "weight"],
    "smooth_l1_loss": ["input", "target", "size_average", "reduce", "reduction", "beta"],
    "huber_loss": ["input", "target", "reduction", "delta", "weight"],
    "kl_div": ["input", "target", "size_average", "reduce", "reduction", "log_target"],
    "cross_entropy": ["input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction",
                      "label_smoothing"],
    "triplet_margin_loss": ["anchor", "positive", "negative", "margin", "p", "eps", "swap", "size_average",
                            "reduce", "reduction"],
}
LOSSES = set(LOSS_SIGS)
# nn module class -> (function, the module attributes that are its arguments); the module's forward takes the
# function's tensors positionally
LOSS_MODULES = {
    "MSELoss": ("mse_loss", ("reduction",)), "L1Loss": ("l1_loss", ("reduction",)),
    "SmoothL1Loss": ("smooth_l1_loss", ("reduction", "beta")), "HuberLoss": ("huber_loss", ("reduction", "delta")),
    "KLDivLoss": ("kl_div", ("reduction", "log_target")),
    "CrossEntropyLoss": ("cross_entropy", ("ignore_index", "reduction", "label_smoothing")),
    "TripletMarginLoss": ("triplet_margin_loss", ("margin", "p", "eps", "swap", "reduction")),
}
_TENSORS = {"triplet_margin_loss": ("anchor", "positive", "negative")}
# float indexes (the class a target names, compared with the column index) are exact below 2^24
_EXACT = 1 << 24


def loss_module_canon(cls: str, mod: dict, target: str, args: list, kwargs: dict, modules: dict) -> tuple[str, dict]:
    """A loss module's call as its function's call: its tensors, its attributes as the arguments. A module holding
    a class weight (CrossEntropyLoss(weight=...)) is marked so the lowering keeps it in PyTorch."""
    fn, attrs = LOSS_MODULES[cls]
    names = _TENSORS.get(fn, ("input", "target"))
    bound = {k: a for k, a in zip(names, args)}
    bound.update({k: v for k, v in kwargs.items() if k in names})
    for a in attrs:
        if a in mod.get("attrs", {}):
            bound[a] = mod["attrs"][a]
    held = modules.get(target, {})
    if any(p["name"] in ("weight", "pos_weight") for p in held.get("params", []) + held.get("buffers", [])):
        bound["weight"] = "module buffer"
    return fn, bound


class LossLowering:
    """Mixed into `Lowerer`: uses its `values`, `items`, `counted`, `labels`, `names`, `_tmp`, `_red` and
    `tensor_operand`."""

    def _loss(self, n: dict, cname: str, b: dict) -> None:
        name = n["name"]
        for legacy in ("size_average", "reduce"):
            if b.get(legacy) is not None:
                raise Unsupported(f"{cname} with the legacy {legacy}= stays in PyTorch")
        if b.get("weight") is not None:
            raise Unsupported(f"{cname} with a weight stays in PyTorch")
        reduction = Arg.const(b.get("reduction", "mean"))
        if reduction not in ("mean", "sum", "none") and not (cname == "kl_div" and reduction == "batchmean"):
            raise Unsupported(f"{cname} with reduction={reduction!r}")
        if self.values[name].dtype != FLOAT:
            raise Unsupported(f"{cname} producing {self.values[name].dtype}")
        start = len(self.items)
        try:
            if cname == "cross_entropy":
                self._cross_entropy(name, b, reduction)
            elif cname == "triplet_margin_loss":
                self._triplet_margin(name, b, reduction)
            else:
                self._elementwise_loss(name, cname, b, reduction)
            final = next(it for it in reversed(self.items) if it.name == name)
            made = final.shape if isinstance(final, Prim) else final.value.shape
            if tuple(made) != tuple(self.values[name].shape):
                raise Unsupported(f"{cname}: synthesized shape {tuple(made)} differs from the traced "
                                  f"{tuple(self.values[name].shape)}")
        except Unsupported:
            del self.items[start:]  # the node stays in PyTorch whole: none of its steps is left behind
            raise
        self.counted[name] = "kernel"
        self.labels[name] = cname

    # --- pieces --------------------------------------------------------------------------------------------
    def _loss_pw(self, name: str, label: str, fn: str, ops: list, shape: tuple, nm: str | None = None,
                 dtype: str = FLOAT, **attrs) -> tuple:
        nm = nm or self._tmp(f"{name}_{fn}", shape, dtype)
        self.items.append(Prim(nm, fn, ops, tuple(shape), dtype, name, attrs, label=label))
        return ("v", nm)

    def _loss_red(self, name: str, label: str, op: str, src: tuple, in_shape: tuple, k: int, keep: bool,
                  nm: str | None = None) -> tuple:
        nl = len(in_shape) - k
        nm = nm or self._tmp(f"{name}_{op}", tuple(in_shape[:nl]) + ((1,) * k if keep else ()))
        self.items.append(self._red(nm, op, src, tuple(in_shape), k, keep, name, label=label))
        return ("v", nm)

    def _float_operand(self, b: dict, key: str, what: str) -> tuple:
        op = self.tensor_operand(b.get(key), what)
        if self.values[op[1]].dtype != FLOAT:
            raise Unsupported(f"{what} of {self.values[op[1]].dtype} (the loss kernels read float32)")
        return op

    def _reduce_all(self, name: str, label: str, per: tuple, reduction: str) -> None:
        """The per-element (or per-row) losses `per` reduced to the node's 0-d value: mean, sum, or kl_div's
        batchmean (the sum divided by the batch size, as F.kl_div does it: after the sum, in float32)."""
        S = tuple(self.values[per[1]].shape)
        if reduction == "batchmean":
            s = self._loss_red(name, label, "sum", per, S, len(S), False)
            self._loss_pw(name, label, "div", [s, ("c", S[0])], (), nm=name)
            return
        self._loss_red(name, label, reduction, per, S, len(S), False, nm=name)

    # --- elementwise losses --------------------------------------------------------------------------------
    def _elementwise_loss(self, name: str, cname: str, b: dict, reduction: str) -> None:
        x = self._float_operand(b, "input", f"{cname}'s input")
        t = self._float_operand(b, "target", f"{cname}'s target")
        S = tuple(self.values[x[1]].shape)
        if tuple(self.values[t[1]].shape) != S:
            raise Unsupported(f"{cname} of an input {S} and a target {tuple(self.values[t[1]].shape)} of another "
                              f"shape (broadcast) stays in PyTorch")
        if not S:
            raise Unsupported(f"{cname} of 0-dim tensors stays in PyTorch")
        last = name if reduction == "none" else None

        def pw(fn, ops, nm=None, dtype=FLOAT):
            return self._loss_pw(name, cname, fn, ops, S, nm=nm, dtype=dtype)

        if cname == "mse_loss":
            d = pw("sub", [x, t])
            per = pw("mul", [d, d], nm=last)
        elif cname == "l1_loss":
            per = pw("abs", [pw("sub", [x, t])], nm=last)
        elif cname in ("smooth_l1_loss", "huber_loss"):
            key, default = ("beta", 1.0) if cname == "smooth_l1_loss" else ("delta", 1.0)
            w = float(Arg.const(b.get(key, default)) if b.get(key) is not None else default)
            if w < 0 or (w == 0 and cname == "huber_loss"):
                raise Unsupported(f"{cname} with {key}={w}")
            if w == 0:  # smooth_l1_loss with beta=0 is l1_loss (ATen dispatches to it)
                per = pw("abs", [pw("sub", [x, t])], nm=last)
            else:
                z = pw("abs", [pw("sub", [x, t])])
                # ATen: z < w ? 0.5 * z * z / beta : z - 0.5 * beta (smooth L1);
                #       z < w ? 0.5 * z * z : delta * (z - 0.5 * delta) (Huber)
                quad = pw("mul", [pw("mul", [("c", 0.5), z]), z])
                if cname == "smooth_l1_loss":
                    quad = pw("div", [quad, ("c", w)])
                    lin = pw("sub", [z, ("c", 0.5 * w)])
                else:
                    lin = pw("mul", [("c", w), pw("sub", [z, ("c", 0.5 * w)])])
                per = pw("where", [pw("lt", [z, ("c", w)], dtype="bool"), quad, lin], nm=last)
        else:  # kl_div
            log_target = Arg.const(b.get("log_target", False))
            if not isinstance(log_target, bool):
                raise Unsupported("kl_div with a non-bool log_target")
            if log_target:  # exp(t) * (t - x)
                per = pw("mul", [pw("exp", [t]), pw("sub", [t, x])], nm=last)
            else:  # xlogy(t, t) - t * x: xlogy is 0 where t == 0 (t * log t would be NaN there)
                tlogt = pw("mul", [t, pw("log", [t])])
                xlogy = pw("where", [pw("eq", [t, ("c", 0.0)], dtype="bool"), ("c", 0.0), tlogt])
                per = pw("sub", [xlogy, pw("mul", [t, x])], nm=last)
        if reduction != "none":
            self._reduce_all(name, cname, per, reduction)

    # --- row losses ----------------------------------------------------------------------------------------
    def _row_loss_out(self, name: str, label: str, per: tuple, reduction: str) -> None:
        """A row loss's (N, 1) per-row values as the node's value: reduced to 0-d, or viewed as (N,)."""
        if reduction == "none":
            out = self.values[name]
            self.items.append(Py(name, f"{self.names[per[1]]}.view({len(out.shape) and out.shape[0]})", [per[1]],
                                 out, "glue", name))
            return
        self._reduce_all(name, label, per, reduction)

    def _cross_entropy(self, name: str, b: dict, reduction: str) -> None:
        """cross_entropy of (N, C) logits with int64 class targets (N,): per row logsumexp(x) - x[target], as
        log_softmax then nll_loss compute it ((x[t] - max) against log(sum(exp(x - max)))); rows whose target is
        ignore_index count neither in the sum nor in the mean's count (all ignored: 0/0, NaN, as in PyTorch).

        The target is picked in the row kernel: the column whose index equals the target (converted to float32
        outside the kernel, one small pass over N values; exact up to 2^24 classes) contributes its logit to a
        sum, every other column 0."""
        label = "cross_entropy"
        if Arg.const(b.get("label_smoothing", 0.0)) not in (0, 0.0, None):
            raise Unsupported("cross_entropy with label_smoothing stays in PyTorch")
        x = self._float_operand(b, "input", "cross_entropy's input")
        xs = tuple(self.values[x[1]].shape)
        tgt = b.get("target")
        tv = self.val(tgt) if tgt is not None else None
        if tv is None or not tv.is_tensor:
            raise Unsupported("cross_entropy without a target tensor")
        if len(xs) != 2:
            raise Unsupported(f"cross_entropy of {len(xs)}-dim logits (the row kernel takes (N, C), classes last)")
        N, C = xs
        if tv.dtype == FLOAT:
            raise Unsupported("cross_entropy with class probabilities as targets stays in PyTorch")
        if tv.dtype != "int64" or tuple(tv.shape) != (N,):
            raise Unsupported(f"cross_entropy with a {tv.dtype} target of shape {tuple(tv.shape)}")
        ignore = Arg.const(b.get("ignore_index", -100))
        if not isinstance(ignore, int) or isinstance(ignore, bool) or not -_EXACT < ignore < _EXACT or C >= _EXACT:
            raise Unsupported(f"cross_entropy with ignore_index={ignore!r} over {C} classes (float indexes are "
                              f"exact below 2^24)")
        rows = (N, 1)
        tf = self._tmp(f"{name}_target", rows)
        tn = self.names[tgt["n"]]
        self.items.append(Py(tf, f"{tn}.to(torch.float32).view({N}, 1)", [tgt["n"]], self.values[tf], "glue", name))
        tf = ("v", tf)

        def pw(fn, ops, shape=xs, nm=None, dtype=FLOAT, **attrs):
            return self._loss_pw(name, label, fn, ops, shape, nm=nm, dtype=dtype, **attrs)

        def red(op, src):
            return self._loss_red(name, label, op, src, xs, 1, True)

        m = red("max", x)
        s = red("sum", pw("exp", [pw("sub", [x, m])]))
        hit = pw("eq", [("col",), tf], dtype="bool", row_k=1)
        picked = red("sum", pw("where", [hit, x, ("c", 0.0)], row_k=1))
        # -(log_softmax(x)[t]) = log(sum) - (x[t] - max)
        nll = pw("sub", [pw("log", [s], rows), pw("sub", [picked, m], rows)], rows)
        valid = pw("ne", [tf, ("c", ignore)], rows, dtype="bool")
        per = pw("where", [valid, nll, ("c", 0.0)], rows, nm=None)
        if reduction != "mean":
            self._row_loss_out(name, label, per, reduction)
            return
        total = self._loss_red(name, label, "sum", per, rows, 2, False)
        count = self._loss_red(name, label, "sum", pw("where", [valid, ("c", 1.0), ("c", 0.0)], rows), rows, 2,
                               False)
        pw("div", [total, count], (), nm=name)

    def _triplet_margin(self, name: str, b: dict, reduction: str) -> None:
        """triplet_margin_loss over (N, D) (or (D,)) rows: max(margin + d(a, p) - d(a, n), 0) with d the
        pairwise distance ||x1 - x2 + eps||_p over the last dim (p 1 or 2; with swap, d(a, n) is min(d(a, n),
        d(p, n))), as ATen's pairwise_distance and triplet_margin_loss compute it."""
        label = "triplet_margin_loss"
        a, pos, neg = (self._float_operand(b, k, f"triplet_margin_loss's {k}")
                       for k in ("anchor", "positive", "negative"))
        S = tuple(self.values[a[1]].shape)
        if any(tuple(self.values[o[1]].shape) != S for o in (pos, neg)) or len(S) not in (1, 2):
            raise Unsupported("triplet_margin_loss of (N, D) or (D,) tensors of one shape (others stay in PyTorch)")
        p = Arg.const(b.get("p", 2.0))
        if p not in (1, 2) or isinstance(p, bool):
            raise Unsupported(f"triplet_margin_loss with p={p!r} (the kernels take p=1 and p=2)")
        margin = float(Arg.const(b.get("margin", 1.0)))
        eps = float(Arg.const(b.get("eps", 1e-6)))
        swap = Arg.const(b.get("swap", False))
        rows = S[:-1] + (1,)

        def pw(fn, ops, shape=S, nm=None):
            return self._loss_pw(name, label, fn, ops, shape, nm=nm)

        def dist(x1, x2):
            d = pw("add", [pw("sub", [x1, x2]), ("c", eps)])
            if p == 1:
                return self._loss_red(name, label, "sum", pw("abs", [d]), S, 1, True)
            ss = self._loss_red(name, label, "sum", pw("mul", [d, d]), S, 1, True)
            return pw("sqrt", [ss], rows)

        dp, dn = dist(a, pos), dist(a, neg)
        if swap:
            dn = pw("minimum", [dn, dist(pos, neg)], rows)
        gap = pw("sub", [pw("add", [("c", margin), dp], rows), dn], rows)
        if len(S) == 1:  # unbatched: one row, the loss is 0-d whatever the reduction
            reduction = "sum"
        per = pw("clamp_min", [gap, ("c", 0.0)], rows)
        self._row_loss_out(name, label, per, reduction)
