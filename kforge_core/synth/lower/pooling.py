"""Pooling (MaxPool / AvgPool / AdaptiveAvgPool / AdaptiveMaxPool, 1d to 3d, module or functional).

On a writer with column kernels (C++, CUDA, Triton) a windowed pool is one window kernel (`ColOp` of kind "pool",
written by `backends/pool_kernels`): each output element reads its window of the input in place -- any kernel
size, stride, padding and dilation, `ceil_mode` (partial last windows), avg's `count_include_pad` and
`divisor_override` -- so nothing is copied first. Global pooling (adaptive to output 1) is a row reduction over the
pooled dims; adaptive pooling whose input is a whole multiple of its output is a window kernel with kernel = stride.

A writer without column kernels (Metal) keeps the row reduction over a window view: the input (padded first when
the pool pads: -inf for max, zeros for avg) unfolded into one window per output element -- `x.unfold(dim, span,
stride)` per pooled dim, then `[..., ::dilation]` -- and a `max` / `mean` row kernel reducing each window. There
`ceil_mode` with a partial window, `count_include_pad=False` with padding, `divisor_override`, and windows that
overlap so much that the view's copy would exceed MAX_BLOWUP times the input stay in PyTorch; the others add a
"likely slower than eager" note when they read a copy.

Everywhere: `return_indices=True` stays in PyTorch (an int64 output of indexes into the input), and so does
adaptive pooling with windows of unequal sizes.
"""

from __future__ import annotations

import re
from math import prod

from .args import Arg
from .colops import ColOp
from .ir import FLOAT, Py, Unsupported, Value, contig_strides
from .rowops import SLOW_NOTE

# the view's contiguous copy may hold at most this many times the input's elements
MAX_BLOWUP = 8.0
_FN = re.compile(r"^(max|avg|adaptive_avg|adaptive_max)_pool([123])d$")
_MODULE = re.compile(r"^module:(Max|Avg|AdaptiveAvg|AdaptiveMax)Pool([123])d$")
_KINDS = {"Max": "max", "Avg": "avg", "AdaptiveAvg": "adaptive_avg", "AdaptiveMax": "adaptive_max"}
# the functional signatures (torch.nn.functional and torch.<name>)
_SIGS = {
    "max": ["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"],
    "avg": ["input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"],
    "adaptive_avg": ["input", "output_size"],
    "adaptive_max": ["input", "output_size", "return_indices"],
}


def pooling_kind(cname: str) -> tuple[str, int] | None:
    """("max" | "avg" | "adaptive_avg" | "adaptive_max", pooled dims) for a pooling operator name, else None."""
    m = _FN.match(cname) or _MODULE.match(cname)
    if m is None:
        return None
    kind = _KINDS.get(m.group(1), m.group(1))
    return kind, int(m.group(2))


def _tuple(v, d: int, what: str) -> tuple:
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            v = list(v) * d
        if len(v) != d or not all(isinstance(x, int) or x is None for x in v):
            raise Unsupported(f"pooling {what}={v!r}")
        return tuple(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,) * d
    raise Unsupported(f"pooling {what}={v!r}")


def out_size(length: int, k: int, s: int, p: int, dil: int, ceil: bool) -> int:
    """PyTorch's pooled length (pooling_output_shape): with ceil_mode the last window must start inside the input or
    its left padding."""
    span = dil * (k - 1) + 1
    num = length + 2 * p - span
    n = (-(-num // s) if ceil else num // s) + 1
    if ceil and (n - 1) * s >= length + p:
        n -= 1
    return n


class PoolingLowering:
    """Mixed into `Lowerer` (graph.py): `_pool` lowers one pooling node."""

    def _pool_args(self, n: dict, cname: str, kind: str) -> dict:
        """The pool's arguments by name, from the module's attributes or the call's arguments."""
        if cname.startswith("module:"):
            mod = n.get("module") or {}
            args = dict(mod.get("attrs", {}))
            args["input"] = (n.get("args") or [None])[0]
            return args
        sig = _SIGS[kind]
        bound = {sig[i]: a for i, a in enumerate(n.get("args", [])) if i < len(sig)}
        bound.update(n.get("kwargs", {}))
        return {k: (v if k == "input" else Arg.const(v)) for k, v in bound.items()}

    def _pool(self, n: dict, cname: str, kind: str, d: int) -> None:
        name = n["name"]
        b = self._pool_args(n, cname, kind)
        x = self.tensor_operand(b.get("input"), "the pooled input")
        xv = self.values[x[1]]
        label = cname.split(":")[-1]
        self.labels[name] = label
        if xv.dtype != FLOAT:
            raise Unsupported(f"pooling of {xv.dtype} (the row kernels reduce float32)")
        if b.get("return_indices"):
            raise Unsupported("return_indices=True: the pool's int64 indexes are not computed by the kernels")
        if len(xv.shape) not in (d + 1, d + 2):
            raise Unsupported(f"{label} of a {len(xv.shape)}-d input")
        out = self.values[name]
        if not out.is_tensor:
            raise Unsupported(f"{label} returns a {out.kind}")
        red = "max" if kind.endswith("max") else "mean"
        spatial = tuple(xv.shape[-d:])
        if kind.startswith("adaptive"):
            want = tuple(s if o is None else o for s, o in zip(spatial, _tuple(b.get("output_size"), d,
                                                                                "output_size")))
            if all(o == 1 for o in want):  # global pooling: a reduction over the pooled dims, no window view
                if out.shape != tuple(xv.shape[:-d]) + (1,) * d:
                    raise Unsupported(f"unexpected {label} shape {out.shape}")
                self.items.append(self._red(name, red, x, tuple(xv.shape), d, True, name, label=label))
                self.counted[name] = "kernel"
                return
            if any(s % o for s, o in zip(spatial, want)):
                raise Unsupported(f"{label} from {spatial} to {want}: windows of unequal sizes (the input is not a "
                                  f"whole multiple of the output) are not written")
            k = tuple(s // o for s, o in zip(spatial, want))
            stride, pad, dil, ceil = k, (0,) * d, (1,) * d, False
        else:
            k = _tuple(b.get("kernel_size"), d, "kernel_size")
            stride = k if b.get("stride") in (None, [], ()) else _tuple(b.get("stride"), d, "stride")
            stride = tuple(kk if s is None else s for kk, s in zip(k, stride))
            pad = _tuple(b.get("padding", 0), d, "padding")
            dil = _tuple(b.get("dilation", 1), d, "dilation") if kind == "max" else (1,) * d
            ceil = bool(b.get("ceil_mode", False))
        include_pad = bool(b.get("count_include_pad", True))
        divisor = b.get("divisor_override") if kind == "avg" else None
        want_shape = tuple(xv.shape[:-d]) + tuple(out_size(L, *a, ceil) for L, a in
                                                  zip(spatial, zip(k, stride, pad, dil)))
        if out.shape != want_shape:
            raise Unsupported(f"unexpected {label} shape {out.shape} (expected {want_shape})")
        if self.columns:
            # the window kernel: every variant above, each output reading its window in place
            win = {"op": red if red == "max" else "avg", "k": k, "s": stride, "p": pad, "dil": dil, "ceil": ceil,
                   "include_pad": include_pad, "divisor": None if divisor is None else int(divisor)}
            self.items.append(ColOp(name, "", [x[1]], out, "colk", name, label=label, kind="pool", x=x[1],
                                    lo=len(xv.shape) - d, hi=len(xv.shape), pool=win))
            self.counted[name] = "kernel"
            return
        self._window_view_pool(name, label, red, x, xv, k, stride, pad, dil, ceil, include_pad, divisor)

    def _window_view_pool(self, name: str, label: str, red: str, x: tuple, xv: Value, k: tuple, stride: tuple,
                          pad: tuple, dil: tuple, ceil: bool, include_pad: bool, divisor) -> None:
        """A writer without column kernels: a row reduction over a window view (copies, with the limits above)."""
        d = len(k)
        spatial = tuple(xv.shape[-d:])
        if divisor is not None:
            raise Unsupported("divisor_override: the mean divides by the window size")
        if red == "mean" and any(pad) and not include_pad:
            raise Unsupported("count_include_pad=False with padding: the divisor varies at the borders")
        if ceil and any(out_size(L, *a, True) != out_size(L, *a, False)
                        for L, a in zip(spatial, zip(k, stride, pad, dil))):
            raise Unsupported("ceil_mode=True that adds a partial window at the end")
        blowup = prod(kk / min(ss, kk) for kk, ss in zip(k, stride))  # window elements per input element
        if blowup > MAX_BLOWUP:
            raise Unsupported(f"overlapping windows ({'x'.join(map(str, k))} at stride {'x'.join(map(str, stride))})"
                              f" would be read through a {blowup:g}x copy of the input; this target's writer has no "
                              f"window kernel reading the input in place")
        src, sv = x, xv
        if any(pad):
            src, sv = self._pool_padded(x, xv, pad, red, name)
        view, vv = self._pool_windows(src, sv, k, stride, dil, name)
        if any(pad) or blowup > 1:
            note = (f"{SLOW_NOTE}: {label} reads its input through a copy of its windows"
                    + (" after a padding copy" if any(pad) else "") + " (a row kernel over a window view)")
            if note not in self.notes:
                self.notes.append(note)
        self.items.append(self._red(name, red, ("v", view), tuple(vv.shape), d, False, name, label=label))
        self.counted[name] = "kernel"

    def _pool_padded(self, x: tuple, xv: Value, pad: tuple, red: str, origin: str) -> tuple[tuple, Value]:
        """x padded on both sides of each pooled dim (a PyTorch copy): with -inf for max (padded cells never win),
        with 0 for avg (count_include_pad: they count in the mean)."""
        d = len(pad)
        shape = tuple(xv.shape[:-d]) + tuple(s + 2 * p for s, p in zip(xv.shape[-d:], pad))
        pads = ", ".join(f"{p}, {p}" for p in reversed(pad))  # F.pad lists the last dim first
        value = "-math.inf" if red == "max" else "0.0"
        if red == "max":
            self.imports.add("math")
        t = self.syn(f"{origin}_padded")
        self.values[t] = Value("t", shape, FLOAT, contig_strides(shape), True)
        self.items.append(Py(t, f"torch.nn.functional.pad({self.names[x[1]]}, ({pads}), value={value})", [x[1]],
                             self.values[t], "glue", origin))
        return ("v", t), self.values[t]

    def _pool_windows(self, x: tuple, xv: Value, k: tuple, stride: tuple, dil: tuple,
                      origin: str) -> tuple[str, Value]:
        """The window view: lead dims, then the output positions, then the window (k) along each pooled dim."""
        d, nd = len(k), len(xv.shape)
        strides = tuple(xv.strides) if xv.strides else contig_strides(xv.shape)
        lead, lead_st = list(xv.shape[:nd - d]), list(strides[:nd - d])
        pos, pos_st, win, win_st, code = [], [], [], [], self.names[x[1]]
        for i in range(d):
            j = nd - d + i
            span = dil[i] * (k[i] - 1) + 1
            pos.append((xv.shape[j] - span) // stride[i] + 1)
            pos_st.append(strides[j] * stride[i])
            win.append(k[i])
            win_st.append(strides[j] * dil[i])
            code += f".unfold({j}, {span}, {stride[i]})"
        if any(dd > 1 for dd in dil):
            code += "[..., " + ", ".join(f"::{dd}" for dd in dil) + "]"
        t = self.syn(f"{origin}_windows")
        shape = tuple(lead + pos + win)
        self.values[t] = Value("t", shape, FLOAT, tuple(lead_st + pos_st + win_st), False)
        self.items.append(Py(t, code, [x[1]], self.values[t], "glue", origin))
        return t, self.values[t]


__all__ = ["MAX_BLOWUP", "PoolingLowering", "out_size", "pooling_kind"]
