"""Elementwise chains fused into the column and window kernels (`lower.colops.ColOp`): the prologue that computes a
column kernel's input (`x * scale` before a reduction over dim 1, an activation before a pool) and the epilogue
applied to its result (an activation after a softmax over a leading dim or after a pool) become part of that
kernel (`ColOp.pre` / `ColOp.post`), instead of elementwise kernels of their own that write and read the whole
tensor again.

A primitive joins a chain when it is elementwise, float32, of one fusable function (`FUSABLE`: a template in every
writer with column kernels), reads exactly one tensor -- the chain's value, at the same shape (no broadcast) -- and
otherwise constants, and when the value it reads is used by nothing else (not another kernel, not the program's
output). A chain may also read tensors holding one value per row of the kernel's input (`ColOp.aux`, each a
`row value`): constant along the window kernel's pooled dims, or along a column kernel's I block (the dims after
the reduced ones) -- a per-channel bias or scale around a pool or a reduction over the channels, a 0-d parameter.
A reduction's epilogue takes none (its rows are reduced away: such operands keep their elementwise kernel).
BatchNorm's statistics kernel (`bnstats`) takes no chain, and the int64 results of argmax/argmin no epilogue.

Applied by `fusion.build_plan` under the `fuse` move, before grouping; the Lowered it is given is left unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from ..lower.colops import ColOp
from ..lower.ir import FLOAT, Lowered, Prim

# elementwise functions every column-kernel writer (C++, CUDA, Triton) has a template for
FUSABLE = frozenset({
    "add", "sub", "mul", "div", "neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal",
    "square", "erf", "sigmoid", "tanh", "relu", "relu6", "silu", "gelu", "gelu_tanh", "mish", "hardsigmoid",
    "hardswish", "selu", "softsign", "leaky_relu", "elu", "celu", "softplus", "threshold", "clamp_min", "clamp_max",
    "maximum", "minimum", "pow",
})
NO_CHAINS = ("bnstats",)


def _per_row(v, shape: tuple, d: int) -> bool:
    """Whether tensor value `v` broadcasts to `shape` with one value per kernel row: size 1 along the last `d` dims
    (pooled, or a column kernel's I block), and along each lead dim the dim's size or 1 (a per-channel bias)."""
    if v is None or not v.is_tensor or v.dtype != FLOAT or len(v.shape) > len(shape):
        return False
    full = (1,) * (len(shape) - len(v.shape)) + tuple(v.shape)
    lead = len(shape) - d
    return all(n == 1 for n in full[lead:]) and all(n in (1, m) for n, m in zip(full[:lead], shape[:lead]))


def _read(p, values: dict, d: int | None, cur: str | None = None) -> tuple[str, list[str]] | None:
    """(the chain value a chain primitive reads, the other tensors it reads), else None (not a chain primitive).
    The chain value is `cur` (an epilogue), or the one operand at the primitive's own shape (a prologue); the
    others must be row values constant along the last `d` dims (None: the chain takes no other tensor)."""
    if not isinstance(p, Prim) or p.fn not in FUSABLE or p.red is not None or p.dtype != FLOAT:
        return None
    if any(o[0] not in ("v", "c") or (o[0] == "c" and (isinstance(o[1], bool) or not isinstance(o[1], (int, float))))
           for o in p.operands):
        return None
    tensors = [o[1] for o in p.operands if o[0] == "v"]
    full = [t for t in tensors if values.get(t) is not None and values[t].is_tensor and values[t].dtype == FLOAT
            and tuple(values[t].shape) == tuple(p.shape)]
    src = cur if cur is not None else (full[0] if len(full) == 1 else None)
    if src is None or src not in full or tensors.count(src) != 1:
        return None
    others = [t for t in tensors if t != src]
    if others and (d is None or not all(_per_row(values.get(t), tuple(p.shape), d) for t in others)):
        return None
    return src, others


def _row_dims(col: ColOp, values: dict) -> tuple[int | None, int | None]:
    """The trailing dims a row value of `col`'s prologue / epilogue is constant along (None: it takes none). A
    window kernel's rows are its lead dims; a column kernel's are (o, r) of its (O, R, I) view, so a reduction's
    result (one value per (o, i)) has none."""
    if col.kind == "pool":
        return len(col.pool["k"]), len(col.pool["k"])
    d = len(values[col.x].shape) - col.hi
    return d, (d if col.same_shape else None)


def fuse_column_chains(low: Lowered) -> Lowered:
    """`low` with each column kernel's fusable prologue and epilogue moved into it (a new Lowered; `low` as it was)."""
    cols = [it for it in low.items if isinstance(it, ColOp) and it.kind not in NO_CHAINS]
    if not cols:
        return low
    made = {it.name: it for it in low.items}
    users: dict[str, list[str]] = defaultdict(list)
    for it in low.items:
        for dep in dict.fromkeys(it.deps):
            users[dep].append(it.name)
    outputs = set(low.output_names)
    absorbed: set[str] = set()
    new: dict[int, ColOp] = {}
    for col in cols:
        d_pre, d_post = _row_dims(col, low.values)
        aux: list[str] = []
        pre, x, reader = [], col.x, col.name
        while x not in outputs and users[x] == [reader]:
            p = made.get(x)
            got = _read(p, low.values, d_pre)
            if got is None or p.name in absorbed:
                break
            pre.insert(0, p)
            aux += got[1]
            reader, x = p.name, got[0]
        post, y = [], col.name
        while col.out_dtype == FLOAT and y not in outputs and len(users[y]) == 1:
            p = made.get(users[y][0])
            got = _read(p, low.values, d_post, cur=y)
            if got is None or p.name in absorbed:
                break
            post.append(p)
            aux += got[1]
            y = p.name
        if pre or post:
            absorbed |= {p.name for p in pre + post}
            aux = list(dict.fromkeys(aux))
            new[id(col)] = replace(col, name=y, deps=[x] + aux, value=low.values[y], x=x, pre=pre, post=post,
                                   aux=aux)
    if not new:
        return low
    items = [new.get(id(it), it) for it in low.items if it.name not in absorbed]
    return replace(low, items=items)


__all__ = ["FUSABLE", "fuse_column_chains"]
