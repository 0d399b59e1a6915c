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


def _chain_rows(col, which: str) -> dict:
    """The row values one of the kernel's chains reads (a reduction's epilogue reads none: its row is gone)."""
    prims = col.pre if which == "pre" else col.post
    read = {o[1] for p in prims for o in p.operands if o[0] == "v"}
    return {a: v for a, v in row_values(col).items() if a in read}


def c_functions(col, qual: str) -> list[str]:
    """The C-family functions `<kernel>_pre(float, rows...)` / `<kernel>_post(float, rows...)` of a kernel's fused
    chains (`qual`: the dialect's helper qualifiers), to be written before the kernel; none for an empty chain."""
    out = []
    for which, prims in (("pre", col.pre), ("post", col.post)):
        if prims:
            rows = _chain_rows(col, which)
            params = "".join(f", float {v}" for v in rows.values())
            out.append(f"{qual} float {col.kname}_{which}(float u{params}) {{ {_c_chain(prims, 'u', 'y', 't', rows)} "
                       "return y; }")
    return out


def row_args(col) -> str:
    """The row values' arrays as the launch passes them, before the sizes ("a0, a1, ")."""
    return "".join(f"a{i}, " for i in range(len(col.aux)))


def row_arrays(col, names: dict, x: str, d: str) -> list[str]:
    """Launch lines making each row value's array a0, ... (`kf_pool_rows`): one float per row of tensor `x`, whose
    last `d` dims (an expression) the rows do not vary along."""
    return [f"a{i} = kf_pool_rows({names[a]}, {x}, {d})" for i, a in enumerate(col.aux)]


def c_row_params(col, restrict: str = "") -> list[str]:
    """A C-family kernel's parameters for the row values' arrays."""
    return [f"const float*{restrict} a{i}" for i in range(len(col.aux))]


def c_row_loads(col, index: str, indent: str = "") -> list[str]:
    """Statements loading the row values of row `index` into av0, ... (kernel parameters a0, ...)."""
    return [f"{indent}const float {v} = a{i}[{index}];" for i, v in enumerate(row_values(col).values())]


def _c_call(col, which: str, arg: str) -> str:
    return f"{col.kname}_{which}({arg}{''.join(', ' + v for v in _chain_rows(col, which).values())})"


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


def triton_stores(stmts: list[str], post: list[Prim], aux: dict | None = None) -> list[str]:
    """A Triton column program's statements with `post` applied to each value stored (`STORE(e)` / `STOREROW(e)`,
    each a statement of its own; `aux`: the row values' variables)."""
    if not post:
        return stmts
    out = []
    for s in stmts:
        m = re.fullmatch(r"(STORE|STOREROW)\((.*)\)", s)
        if m is None:
            out.append(s)
            continue
        out += [f"kf_r = {m.group(2)}"] + triton_chain(post, "kf_r", "kf_y", "post", aux) + [f"{m.group(1)}(kf_y)"]
    return out
