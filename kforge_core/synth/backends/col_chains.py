"""The elementwise primitives fused into a column or window kernel (`ColOp.pre` / `ColOp.post`, chosen by
`plan.col_fusion`) written as statements: each primitive reads the previous one's value (the first reads the value
the kernel loaded, or computed) and constants only, so a chain is a straight line of scalar (C-family) or block
(Triton) assignments ending in the variable the kernel goes on with."""

from __future__ import annotations

import re

from .cexprs import flit, node_expr
from .triton_exprs import plit, triton_expr
from ..lower.ir import Prim
from ..plan.plans import knode_of


def _operand_code(prims: list[Prim], src: str, var, lit, aux: dict):
    """Renders an operand of a chain primitive: the previous value (or `src` for the first), a row value (`aux`:
    value name -> variable), or a constant."""
    names = {p.name: var(i) for i, p in enumerate(prims)} | aux

    def code(o) -> str:
        if o[0] == "c":
            return lit(o[1])
        if o[0] == "v":
            return names.get(o[1], src)
        raise ValueError(f"a fused elementwise chain reads {o!r}")

    return code


def _c_chain(prims: list[Prim], src: str, dst: str, tag: str, aux: dict) -> str:
    """C statements `const float dst = chain(src);` (one line; `tag` keeps the temporaries' names unique)."""
    if not prims:
        return f"const float {dst} = {src};"
    var = (lambda i: f"{tag}{i}")
    code = _operand_code(prims, src, var, flit, aux)
    parts = [f"const float {var(i)} = {node_expr(knode_of(p, p.operands, 'E'), code)};" for i, p in enumerate(prims)]
    return " ".join(parts + [f"const float {dst} = {var(len(prims) - 1)};"])


def row_values(col) -> dict:
    """The variables a kernel holds its row's `col.aux` values in (av0, av1, ...), by value name."""
    return {a: f"av{i}" for i, a in enumerate(col.aux)}


def triton_chain(prims: list[Prim], src: str, dst: str, tag: str, aux: dict | None = None) -> list[str]:
    """Triton assignments `dst = chain(src)`, one a line (`aux`: the row values' variables)."""
    if not prims:
        return [f"{dst} = {src}"]
    var = (lambda i: f"{tag}{i}")
    code = _operand_code(prims, src, var, plit, aux or {})
    lines = [f"{var(i)} = {triton_expr(knode_of(p, p.operands, 'E'), code)}" for i, p in enumerate(prims)]
    return lines + [f"{dst} = {var(len(prims) - 1)}"]


_C_STORE = re.compile(r"\b(OUTR|OUT) = ([^;]+);")


def c_functions(col, qual: str) -> list[str]:
    """The C-family functions `<kernel>_pre(float)` / `<kernel>_post(float)` of a kernel's fused chains (`qual`:
    the dialect's helper qualifiers), to be written before the kernel; none for an empty chain."""
    rows = row_values(col)
    params = "".join(f", float {v}" for v in rows.values())
    return [f"{qual} float {col.kname}_{which}(float u{params}) {{ {_c_chain(prims, 'u', 'y', 't', rows)} "
            "return y; }" for which, prims in (("pre", col.pre), ("post", col.post)) if prims]


def _c_call(col, which: str, arg: str) -> str:
    return f"{col.kname}_{which}({arg}{''.join(', ' + v for v in row_values(col).values())})"


def c_read(col, ref: str) -> str:
    """An element the kernel reads, through its fused prologue (the row values in the kernel's av0, ...)."""
    return _c_call(col, "pre", ref) if col.pre else ref


def c_post(col, value: str) -> str:
    """A value the kernel writes, through its fused epilogue."""
    return _c_call(col, "post", value) if col.post else value


def c_stores(stmt: str, col) -> str:
    """A column program's statement with the fused epilogue applied to each value it writes (`OUT = e;`)."""
    if not col.post:
        return stmt
    return _C_STORE.sub(lambda m: f"{m.group(1)} = {c_post(col, m.group(2))};", stmt)


def triton_stores(stmts: list[str], post: list[Prim]) -> list[str]:
    """A Triton column program's statements with `post` applied to each value stored (`STORE(e)` / `STOREROW(e)`,
    each a statement of its own)."""
    if not post:
        return stmts
    out = []
    for s in stmts:
        m = re.fullmatch(r"(STORE|STOREROW)\((.*)\)", s)
        if m is None:
            out.append(s)
            continue
        out += [f"kf_r = {m.group(2)}"] + triton_chain(post, "kf_r", "kf_y", "post") + [f"{m.group(1)}(kf_y)"]
    return out
