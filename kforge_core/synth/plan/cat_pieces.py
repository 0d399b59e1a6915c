"""The `cat` specifics of a kernel plan: a last-dim concatenation is computed piece by piece.

Each piece covers columns [lo, lo + w) of the output row and reads its operands at its own row width `w`, so
its slots are located through strides (`Slot.piece_w`) rather than as `r * cols`.
"""

from __future__ import annotations

from math import prod

from .plans import Slot, knode_of, storage_ctype
from .rowspace import expanded_strides, varies_inner


def piece_leaves(pc: dict) -> list[str]:
    """The external values a cat piece reads (at the piece's width)."""
    inside = {q.name for q in pc["prims"]}
    ops = [o for q in pc["prims"] for o in q.operands] + [pc["root"]]
    out = []
    for o in ops:
        if o[0] == "v" and o[1] not in inside and o[1] not in out:
            out.append(o[1])
    return out


def piece_slot(index: int, v: str, val, lead: tuple, w: int, k: int) -> Slot:
    """A slot read inside a cat piece: rows of width w, so rows are located through strides (not r * cols)."""
    T = tuple(lead) + (w,)
    ctype = storage_ctype(val.dtype)
    inner = 1 if varies_inner(val.shape, T, k) else 0
    lead_st = expanded_strides(val.shape, val.strides, T)[:len(lead)]
    if all(st == 0 or lead[i] == 1 for i, st in enumerate(lead_st)):
        mode = "zero"
    elif not inner and val.contiguous and prod(val.shape) == prod(lead):
        mode = "rowmajor"
    else:
        mode = "general"
    return Slot(index, v, "tensor", ctype, inner, mode, False, w)


def piece_plan(pc: dict, slot_index: dict) -> dict:
    """A cat piece as kernel nodes: operands are its own nodes, its slots (at the piece's width) or constants."""
    inside = {q.name for q in pc["prims"]}
    form = f"piece{pc['w']}"

    def op(o):
        if o[0] != "v":
            return o
        return ("node", o[1]) if o[1] in inside else ("slot", slot_index[(o[1], form)])

    nodes = [knode_of(q, [op(o) for o in q.operands], "E") for q in pc["prims"]]
    return {"lo": pc["lo"], "w": pc["w"], "nodes": nodes, "root": op(pc["root"])}
