"""A column kernel's per-column program, shared by the C++ and CUDA writers (`columns`) and the CUDA column
reductions shared among threads (`cuda.colsplit`): its state, its passes over r and its final write, written once
with placeholders (A(name) a state variable, P(name) another thread's, OUT / OUTR where values go) that each writer
expands for its layout; and the small pieces of a kernel's signature and row reads both writers print."""

from __future__ import annotations

import re

from .col_chains import c_row_loads, c_row_params, c_stores
from ..lower.colops import ColOp


def program(col: ColOp, gpu: bool) -> dict:
    """The per-column program: state declarations, passes over r (statements over `v`), and the final writes, with
    the fused epilogue (`col.post`) applied to every value written; for `SPLIT_KINDS`, also the combine of another
    thread's partial state (over other rows of the column) into this one's.
    Statements use A(name) for a per-column state variable (an array slot on the CPU, a register on the GPU), P(name)
    for the other thread's (combines); `OUT` is where the column's value goes (reductions), `OUTR` the element at r
    (same-shape kinds)."""
    prog = base_program(col, gpu)
    return dict(prog, passes=[c_stores(s, col) for s in prog["passes"]], final=c_stores(prog["final"], col))


def base_program(col: ColOp, gpu: bool) -> dict:
    sum_t = "double"
    kind, op = col.kind, col.op
    if kind == "reduce":
        if op in ("sum", "mean"):
            final = "(float)(A(acc) / (double)R)" if op == "mean" else "(float)A(acc)"
            return {"state": [(sum_t, "acc", "0.0")], "passes": ["A(acc) += (double)v;"],
                    "combine": "A(acc) += P(acc);", "final": f"OUT = {final};"}
        cmp = ">" if op == "max" else "<"
        init = "-INFINITY" if op == "max" else "INFINITY"
        # NaN propagates: once the accumulator is NaN nothing replaces it; partials combine by the same step
        step = "A(acc) = ({u} {cmp} A(acc) || {u} != {u}) ? {u} : A(acc);"
        return {"state": [("float", "acc", init)], "passes": [step.format(u="v", cmp=cmp)],
                "combine": step.format(u="P(acc)", cmp=cmp), "final": "OUT = A(acc);"}
    if kind in ("argmax", "argmin"):
        cmp = ">" if kind == "argmax" else "<"
        init = "-INFINITY" if kind == "argmax" else "INFINITY"
        # the first extreme (strict comparison), the first NaN when there is one (then nothing replaces it)
        step = ("{{ const bool up = A(best) == A(best) && (v {cmp} A(best) || v != v); "
                "A(best) = up ? v : A(best); A(bi) = up ? r : A(bi); }}")
        # partials over interleaved rows compare (value, index) pairs: a NaN beats a number, the lower index a tie
        combine = (f"{{ const bool up = P(best) != P(best) ? (A(best) == A(best) || P(bi) < A(bi)) : "
                   f"(A(best) == A(best) && (P(best) {cmp} A(best) || (P(best) == A(best) && P(bi) < A(bi)))); "
                   "A(best) = up ? P(best) : A(best); A(bi) = up ? P(bi) : A(bi); }")
        # on the GPU a thread's index starts at its first row, threadIdx.y: each partial names one of its own rows
        return {"state": [("float", "best", init),
                          ("long long", "bi", "threadIdx.y") if gpu else ("int64_t", "bi", "0")],
                "passes": [step.format(cmp=cmp)], "combine": combine, "final": "OUT = A(bi);"}
    if kind in ("softmax", "log_softmax", "logsumexp"):
        state = [("float", "m", "-INFINITY"), (sum_t, "s", "0.0")]
        p1 = "A(m) = (v > A(m) || v != v) ? v : A(m);"
        if kind == "logsumexp":
            # an all -inf (or +inf) column: shift by 0 so the result is log(0) = -inf (inf), as PyTorch's
            p2 = "A(s) += (double)kf_exp(v - (kf_isinf(A(m)) ? 0.0f : A(m)));"
            return {"state": state, "passes": [p1, p2],
                    "final": "OUT = kf_log((float)A(s)) + (kf_isinf(A(m)) ? 0.0f : A(m));"}
        p2 = "A(s) += (double)kf_exp(v - A(m));"
        write = ("OUTR = kf_exp(v - A(m)) * (float)(1.0 / A(s));" if kind == "softmax" else
                 "OUTR = v - A(m) - kf_log((float)A(s));")
        return {"state": state, "passes": [p1, p2, write], "final": ""}
    if kind == "scan":
        acc_t = "double" if (op == "sum" or not gpu) else "float"
        init = "0.0" if op == "sum" else "1.0"
        sym = "+" if op == "sum" else "*"
        return {"state": [(acc_t, "acc", init)], "passes": [f"A(acc) {sym}= ({acc_t})v; OUTR = (float)A(acc);"],
                "final": ""}
    raise ValueError(f"no column program for {kind}")


def r_loop_head(index_t: str, reverse: bool, sep: str) -> str:
    """The opening of a loop over r in order, or from the end (a reversed scan)."""
    if reverse:
        return f"for ({index_t} q = 0; q < R; ++q) {{{sep}const {index_t} r = R - 1 - q;"
    return f"for ({index_t} r = 0; r < R; ++r) {{"


def expand(stmt: str, cpu: bool) -> str:
    return re.sub(r"A\((\w+)\)", (lambda m: f"{m.group(1)}_[j]") if cpu else (lambda m: m.group(1)), stmt)


def row_params(col: ColOp, restrict: str = "") -> str:
    """The row values' array parameters of a column kernel, before its sizes."""
    return "".join(p + ", " for p in c_row_params(col, restrict))


def row_loads(col: ColOp) -> str:
    """The row values of the column's element (o, r), on the line that reads it."""
    return "".join(s + " " for s in c_row_loads(col, "o * R + r"))


def out_type(col: ColOp, gpu: bool) -> str:
    if col.out_dtype == "int64":
        return "long long" if gpu else "int64_t"
    return "float"
