"""Turn one group of primitives into a `KernelPlan`.

Chooses the row width `k` when no reduction fixes it, classifies the kernel's external operands into slots
(scalar, per-row or per-element; row-major, constant over the rows or strided), gives every node its level
(element `E` or row `R`) and the reduction pass after which a row-level value is available, and picks the
outputs (writing in place over a fresh single-use input where it can). `plan_problems` names the outputs that
cannot be written at their own shape by the kernel, so that `build_plan` can isolate them.
"""

from __future__ import annotations

from math import prod

from .cat_pieces import piece_leaves, piece_plan, piece_slot
from ..lower.graph import Lowered
from .grouping import Group
from .plans import KernelPlan, KNode, KOut, Slot, knode_of, storage_ctype
from .rowspace import clean_inner, expanded_strides, rowmajor_inner, varies_inner


def _choose_k(g: Group, values: dict, slot_values: list[tuple[str, str]]) -> int:
    S = g.S
    nd = len(S)
    if nd == 0:
        return 0
    shapes = [tuple(p.shape) for p in g.prims]
    best_shape_only = None
    for k in range(nd, 0, -1):
        if not all(clean_inner(s, S, k) for s in shapes):
            continue
        ok_shapes = True
        ok_strides = True
        for v, _ in slot_values:
            val = values[v]
            if not val.is_tensor:
                continue
            if not clean_inner(val.shape, S, k):
                ok_shapes = False
                break
            if varies_inner(val.shape, S, k) and not rowmajor_inner(val.shape, val.strides, S, k):
                ok_strides = False
        if not ok_shapes:
            continue
        if ok_strides:
            return k
        if best_shape_only is None:
            best_shape_only = k
    return best_shape_only or 1


def plan_kernel(g: Group, index: int, low: Lowered, users: dict, output_names: set,
                fresh_single_use: set) -> KernelPlan:
    values = low.values
    members = g.names
    prims = g.prims
    # external operands (value, form)
    ext: list[tuple[str, str]] = []
    for p in prims:
        form = g.form.get(p.name, "keep")
        for o in p.operands:
            if o[0] == "v" and o[1] not in members:
                key = (o[1], form if p.fn not in ("red", "cat") else "keep")
                if p.fn == "cat":
                    continue
                if key not in ext:
                    ext.append(key)
        for pc in (p.attrs.get("pieces", []) if p.fn == "cat" else []):
            for v in piece_leaves(pc):
                if (v, f"piece{pc['w']}") not in ext:
                    ext.append((v, f"piece{pc['w']}"))
    k = g.k if g.k is not None else _choose_k(g, values, ext)
    S = g.S
    rank = len(S)
    nl = rank - k
    lead = S[:nl]
    slots: list[Slot] = []
    slot_index: dict[tuple, int] = {}
    for v, form in ext:
        val = values[v]
        drop = form == "drop"
        if val.kind == "s" or not val.is_tensor:
            s = Slot(len(slots), v, "scalar", "float", 0, "zero", drop)
        elif form.startswith("piece"):
            s = piece_slot(len(slots), v, val, lead, int(form[5:]), k)
        else:
            ctype = storage_ctype(val.dtype)
            target = lead if drop else S
            inner = 1 if (not drop and varies_inner(val.shape, S, k)) else 0
            est = expanded_strides(val.shape, val.strides, target)
            lead_st = est[:nl]
            if all(st == 0 or lead[i] == 1 for i, st in enumerate(lead_st)):
                mode = "zero"
            else:
                dense = val.contiguous and val.is_tensor and (
                    prod(val.shape) == (prod(S) if inner else prod(lead)))
                mode = "rowmajor" if dense else "general"
            reused = bool(inner) and mode == "general" and any(st == 0 and lead[i] > 1 for i, st in enumerate(lead_st))
            s = Slot(len(slots), v, "tensor", ctype, inner, mode, drop, reused=reused)
        slot_index[(v, form)] = len(slots)
        slots.append(s)
    # levels and passes
    level: dict[str, str] = {}
    rpass: dict[str, int] = {}
    knodes: list[KNode] = []
    npasses = 0
    for p in prims:
        form = g.form.get(p.name, "keep")
        ops = []
        for o in (p.operands if p.fn != "cat" else []):
            if o[0] == "v" and o[1] in members:
                ops.append(("node", o[1]))
            elif o[0] == "v":
                ops.append(("slot", slot_index[(o[1], form if p.fn != "red" else "keep")]))
            else:
                ops.append(o)
        if p.fn == "cat":
            level[p.name], rpass[p.name] = "E", 0
            knodes.append(KNode(p.name, "cat", [], "E", "float", {"pieces": [
                piece_plan(pc, slot_index) for pc in p.attrs["pieces"]]}))
            continue
        if p.fn == "red":
            src = ops[0]
            dep_pass = _operand_pass(src, knodes, rpass, level)
            ps = dep_pass + 1
            npasses = max(npasses, ps)
            level[p.name] = "R"
            rpass[p.name] = ps
            knodes.append(KNode(p.name, "red", ops, "R", "float", dict(p.attrs),
                                red={"op": p.red["op"], "pass": ps}, rpass=ps))
            continue
        if form == "drop":
            lv = "R"
        else:
            lv = "E" if varies_inner(tuple(p.shape), S, k) else "R"
        # an E-level operand forces E
        for o in ops:
            if o[0] == "node" and level.get(o[1]) == "E":
                lv = "E"
            if o[0] == "slot" and slots[o[1]].kind == "tensor" and slots[o[1]].inner == 1:
                lv = "E"
        level[p.name] = lv
        rp = max([_operand_pass(o, knodes, rpass, level) for o in ops] + [0])
        rpass[p.name] = rp if lv == "R" else 0
        knodes.append(knode_of(p, ops, lv, rpass[p.name]))
    # outputs
    outputs: list[KOut] = []
    used_inplace: set = set()
    for p in prims:
        outside = users.get(p.name, set()) - members
        if not outside and p.name not in output_names:
            continue
        lv = level[p.name]
        out = KOut(p.name, lv, g.form.get(p.name) == "drop", storage_ctype(p.dtype))
        if lv == "E" and out.dtype == "float":
            for s in slots:
                if (s.kind == "tensor" and s.ctype == "float" and s.inner == 1 and s.mode == "rowmajor"
                        and s.value in fresh_single_use
                        and s.piece_w is None
                        and s.index not in used_inplace and users.get(s.value, set()) <= members
                        and s.value not in output_names and tuple(values[s.value].shape) == S):
                    out.inplace_slot = s.index
                    used_inplace.add(s.index)
                    break
        outputs.append(out)
    shape_slots = [s.index for s in slots if s.kind == "tensor" and not s.drop and s.piece_w is None]
    origins = []
    for p in prims:
        if p.origin not in origins:
            origins.append(p.origin)
    labels = []
    for p in prims:
        lab = low.labels.get(p.origin) or p.label
        if p.label == "bias":
            lab = "bias"
        if lab not in labels:
            labels.append(lab)
    return KernelPlan(f"kf_k{index}", rank, k, slots, knodes, outputs, npasses, [p.name for p in prims], origins,
                      "+".join(labels), shape_slots, prod(S[rank - k:]))



def _operand_pass(o, knodes, rpass, level) -> int:
    if o[0] == "node":
        return rpass.get(o[1], 0) if level.get(o[1]) == "R" else max(
            [0] + [_node_dep_pass(o[1], knodes, rpass, level)])
    return 0


def _node_dep_pass(name, knodes, rpass, level) -> int:
    """For an E-level node: the latest pass among the row-level values it (transitively) reads."""
    node = next(n for n in knodes if n.name == name)
    best = 0
    for o in node.operands:
        if o[0] == "node":
            if level.get(o[1]) == "R":
                best = max(best, rpass.get(o[1], 0))
            else:
                best = max(best, _node_dep_pass(o[1], knodes, rpass, level))
    return best


def plan_problems(g: Group, plan: KernelPlan, values: dict) -> list[str]:
    """Primitives that cannot be outputs of this kernel at their own shape (they get their own kernel)."""
    bad = []
    S, k = g.S, plan.k
    lead = S[:len(S) - k]
    for out in plan.outputs:
        shape = tuple(values[out.node].shape)
        if out.level == "E":
            if shape != S:
                bad.append(out.node)
        else:
            want = lead if out.drop else lead + (1,) * k
            if shape != want:
                bad.append(out.node)
    return bad

