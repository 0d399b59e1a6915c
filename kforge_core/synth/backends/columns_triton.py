"""The column kernels (`lower.colops.ColOp`) in Triton, and their launch lines (host helpers: `columns`).

A program takes (o, a block of BLOCK consecutive i) and walks r, each lane an output column, so its loads are
contiguous when sI is 1; a row scan (I == 1) takes one row a program, BLOCK elements at a time through `tl.cumsum`
/ `tl.cumprod` with a carry; `bnstats` one channel a program. Sums accumulate in float64, cumprod in float32 (as
PyTorch does on the GPU).
"""

from __future__ import annotations

from ..lower.colops import ColOp
from . import pool_kernels
from .col_chains import row_args, row_values, triton_chain, triton_stores
from .columns import launch_lines

BLOCK = 128
ROW_BLOCK = 1024


def _state_and_passes(col: ColOp) -> tuple[list[str], list[list[str]], list[str]]:
    """(state initialisers, statements of each pass over r (reading `v`, storing through STORE(value)),
    final statements)."""
    kind, op = col.kind, col.op
    zeros = "tl.zeros([BLOCK], dtype=tl.float64)"
    if kind == "reduce":
        if op in ("sum", "mean"):
            fin = "acc / R" if op == "mean" else "acc"
            return [f"acc = {zeros}"], [["acc += v.to(tl.float64)"]], [f"STORE(({fin}).to(tl.float32))"]
        cmp = ">" if op == "max" else "<"
        init = "-float('inf')" if op == "max" else "float('inf')"
        return ([f"acc = tl.full([BLOCK], {init}, tl.float32)"],
                [[f"acc = tl.where((v {cmp} acc) | (v != v), v, acc)"]], ["STORE(acc)"])
    if kind in ("argmax", "argmin"):
        cmp = ">" if kind == "argmax" else "<"
        init = "-float('inf')" if kind == "argmax" else "float('inf')"
        return ([f"best = tl.full([BLOCK], {init}, tl.float32)", "bi = tl.zeros([BLOCK], dtype=tl.int64)"],
                [[f"up = (best == best) & ((v {cmp} best) | (v != v))", "best = tl.where(up, v, best)",
                  "bi = tl.where(up, rr, bi)"]], ["STORE(bi)"])
    if kind in ("softmax", "log_softmax", "logsumexp"):
        state = ["m = tl.full([BLOCK], -float('inf'), tl.float32)", f"s = {zeros}"]
        p1 = ["m = tl.where((v > m) | (v != v), v, m)"]
        if kind == "logsumexp":
            shift = "tl.where((m == float('inf')) | (m == -float('inf')), 0.0, m)"
            return (state, [p1, [f"s += tl.exp(v - {shift}).to(tl.float64)"]],
                    [f"STORE(tl.log(s.to(tl.float32)) + {shift})"])
        p2 = ["s += tl.exp(v - m).to(tl.float64)"]
        write = (["STOREROW(tl.exp(v - m) * (1.0 / s).to(tl.float32))"] if kind == "softmax" else
                 ["STOREROW(v - m - tl.log(s.to(tl.float32)))"])
        return state, [p1, p2, write], []
    if kind == "scan":
        if op == "sum":
            return [f"acc = {zeros}"], [["acc += v.to(tl.float64)", "STOREROW(acc.to(tl.float32))"]], []
        return (["acc = tl.full([BLOCK], 1.0, tl.float32)"], [["acc = acc * v", "STOREROW(acc)"]], [])
    raise ValueError(f"no column program for {kind}")


def _column(col: ColOp) -> list[str]:
    state, passes, final = _state_and_passes(col)
    rows = row_values(col)
    passes, final = [triton_stores(p, col.post, rows) for p in passes], triton_stores(final, col.post, rows)
    rr = "R - 1 - r" if col.reverse else "r"
    lines = ["@triton.jit",
             f"def {col.kname}(x, out, {row_args(col)}O, R, I, sO, sR, sI, BLOCK: tl.constexpr):",
             f"    # {col.label}: column kernel ({col.kind}), a lane an output column",
             "    pid = tl.program_id(0).to(tl.int64)",
             "    nb = tl.cdiv(I, BLOCK)",
             "    o = pid // nb",
             "    offs = (pid - o * nb) * BLOCK + tl.arange(0, BLOCK)",
             "    mask = offs < I",
             "    xo = x + o * sO + offs * sI"]
    lines += ["    " + s for s in state]
    for stmts in passes:
        lines += ["    for r in range(0, R):", f"        rr = {rr}"]
        lines += [f"        {v} = tl.load(a{i} + o * R + rr)" for i, v in enumerate(rows.values())]
        if col.pre:
            lines.append("        u = tl.load(xo + rr * sR, mask=mask, other=0.0)")
            lines += ["        " + s for s in triton_chain(col.pre, "u", "v", "pre", rows)]
        else:
            lines.append("        v = tl.load(xo + rr * sR, mask=mask, other=0.0)")
        lines += ["        " + s.replace("STOREROW(", "tl.store(out + (o * R + rr) * I + offs, ") for s in stmts]
    for s in final:
        lines.append("    " + s.replace("STORE(", "tl.store(out + o * I + offs, "))
    lines = [_masked(line) for line in lines]
    if col.kind == "scan":
        lines += [""] + _row_scan(col)
    return lines


def _masked(line: str) -> str:
    """A store written through STORE/STOREROW gets the lane mask as its last argument."""
    if "tl.store(out" in line and not line.rstrip().endswith("mask=mask)"):
        return line.rstrip()[:-1] + ", mask=mask)"
    return line


def _row_scan(col: ColOp) -> list[str]:
    fn = "tl.cumsum" if col.op == "sum" else "tl.cumprod"
    ident = "0.0" if col.op == "sum" else "1.0"
    sym = "+" if col.op == "sum" else "*"
    r = "R - 1 - idx" if col.reverse else "idx"
    lines = ["@triton.jit",
             f"def {col.kname}_rows(x, out, {row_args(col)}O, R, sO, sR, BLOCK: tl.constexpr):",
             f"    # {col.label}: row scan along the last dim, a program a row, BLOCK elements at a time",
             "    o = tl.program_id(0).to(tl.int64)",
             f"    carry = tl.sum(tl.zeros([BLOCK], dtype=tl.float32), 0) + {ident}",
             "    for r0 in range(0, R, BLOCK):",
             "        idx = r0 + tl.arange(0, BLOCK)",
             "        ok = idx < R",
             f"        r = {r}"]
    rows = row_values(col)
    lines += [f"        {v} = tl.load(a{i} + o * R + r, mask=ok, other=0.0)" for i, v in enumerate(rows.values())]
    if col.pre:
        lines.append("        u = tl.load(x + o * sO + r * sR, mask=ok, other=0.0)")
        lines += ["        " + s for s in triton_chain(col.pre, "u", "p", "pre", rows)]
        lines.append(f"        v = tl.where(ok, p, {ident})")  # lanes past the row stay the scan's identity
    else:
        lines.append(f"        v = tl.load(x + o * sO + r * sR, mask=ok, other={ident})")
    lines.append(f"        c = carry {sym} {fn}(v, 0)")
    if col.post:
        lines += ["        " + s for s in triton_chain(col.post, "c", "y", "post", rows)]
    return lines + [f"        tl.store(out + o * R + r, {'y' if col.post else 'c'}, mask=ok)",
                    "        last = tl.minimum(R - r0, BLOCK) - 1",
                    "        carry = tl.sum(tl.where(tl.arange(0, BLOCK) == last, c, 0.0), 0)"]


def _bnstats(col: ColOp) -> list[str]:
    def sweep(acc: str, term: str) -> list[str]:
        return [f"    {acc} = tl.zeros([BLOCK], dtype=tl.float64)",
                "    for e0 in range(0, M, BLOCK):",
                "        e = e0 + tl.arange(0, BLOCK)",
                "        n = e // I",
                "        v = tl.load(x + n * sO + c * sR + (e - n * I) * sI, mask=e < M, other=0.0).to(tl.float64)",
                f"        {acc} += {term}"]

    return (["@triton.jit",
             f"def {col.kname}(x, out, O, R, I, sO, sR, sI, BLOCK: tl.constexpr):",
             f"    # {col.label}: per-channel batch statistics of x viewed as (N, C, S), a program a channel",
             "    c = tl.program_id(0).to(tl.int64)",
             "    M = O * I"] + sweep("s", "v") + ["    mean = tl.sum(s, 0) / M"] +
            sweep("q", "tl.where(e < M, (v - mean) * (v - mean), 0.0)") +
            ["    tl.store(out + c, mean.to(tl.float32))",
             "    tl.store(out + R + c, (tl.sum(q, 0) / M).to(tl.float32))"])


def triton_source(cols: list[ColOp]) -> str:
    writers = {"bnstats": _bnstats, "pool": pool_kernels.triton_pool}
    return "\n\n".join("\n".join(writers.get(c.kind, _column)(c)) for c in cols)


def triton_launch(col: ColOp, names: dict) -> list[str]:
    if col.kind == "pool":
        return pool_kernels.triton_launch(col, names)
    if col.kind == "bnstats":
        call = f"{col.kname}[(max(1, R),)](xc, out, O, R, I, sO, sR, sI, BLOCK={ROW_BLOCK})"
    else:
        call = (f"{col.kname}[(max(1, O * triton.cdiv(I, {BLOCK})),)](xc, out, {row_args(col)}O, R, I, sO, sR, sI, "
                f"BLOCK={BLOCK})")
        if col.kind == "scan":
            call = "\n".join(["if I == 1:",
                              f"    {col.kname}_rows[(max(1, O),)](xc, out, {row_args(col)}O, R, sO, sR, "
                              f"BLOCK={ROW_BLOCK})",
                              "else:", f"    {call}"])
    return launch_lines(col, names, call)
