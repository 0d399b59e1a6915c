"""Group primitives into kernels and describe each kernel as a backend-independent `KernelPlan`.

A kernel works on a *row space*: the element shape `S` viewed as `rows x cols`, where `cols` is the product of the
trailing `k` dimensions. Every value inside a kernel is either element-level (`E`, varies along the row) or
row-level (`R`, one value per row: reduction results, per-row operands, anything computed only from those).
Reductions run over the row; a kernel with reductions makes one pass over the row per dependent reduction level,
then a final pass that writes its element-level outputs.

Unfused (`fuse=False`): one kernel per traced node (a composite such as softmax is still one kernel).
Fused: greedy, in topological order, a primitive joins the kernel(s) of its producers when the row spaces agree
and merging creates no cycle; kernels are emitted in a topological order of the units.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from .graph import FLOAT, Lowered, Prim, Py


@dataclass
class Slot:
    """An external operand of a kernel."""

    index: int
    value: str  # value name
    kind: str  # "tensor" | "scalar"
    ctype: str = "float"  # "float" | "bool" | "kf_bf16" | "kf_f16" (16-bit storage, read as float)
    inner: int = 1  # 1: varies along the row (stride 1), 0: one value per row
    mode: str = "rowmajor"  # "rowmajor" | "zero" (same for every row) | "general" (strides from meta)
    drop: bool = False  # indexed by the row only (a reduction result without keepdim)
    piece_w: int | None = None  # read by a `cat` piece: rows of this width, at column c - lo of the piece

    @property
    def is_row_level(self) -> bool:
        return self.kind == "scalar" or self.inner == 0


@dataclass
class KNode:
    name: str
    fn: str
    operands: list  # ("slot", i) | ("node", name) | ("c", value) | ("cols", k)
    level: str  # "E" | "R"
    dtype: str  # "float" | "bool"
    attrs: dict = field(default_factory=dict)
    red: dict | None = None  # {"op", "pass"}
    rpass: int = 0  # R-level: the pass after which the value is available; E-level: 0
    half: str = ""  # "bfloat16" | "float16": PyTorch's result has that dtype, so the float value is rounded to it


@dataclass
class KOut:
    node: str
    level: str
    drop: bool
    dtype: str  # C storage type, as Slot.ctype
    inplace_slot: int | None = None


@dataclass
class KernelPlan:
    name: str
    rank: int
    k: int
    slots: list[Slot]
    nodes: list[KNode]
    outputs: list[KOut]
    npasses: int  # number of reduction passes (0 for pointwise kernels)
    members: list[str]  # primitive names
    origins: list[str]  # traced nodes covered
    label: str
    shape_slots: list[int]  # tensor slots whose broadcast gives S at run time

    @property
    def nl(self) -> int:
        return self.rank - self.k

    @property
    def has_reduction(self) -> bool:
        return self.npasses > 0

    def slot_for(self, value: str, drop: bool) -> Slot:
        return next(s for s in self.slots if s.value == value and s.drop == drop)


@dataclass
class ProgramPlan:
    units: list  # Py | KernelPlan, in emission order
    lowered: Lowered
    kernels: list[KernelPlan]


# ---------------------------------------------------------------------------------------------- shape helpers

def _aligned(shape: tuple, rank: int) -> tuple:
    return (1,) * (rank - len(shape)) + tuple(shape)


def broadcastable(small: tuple, big: tuple) -> bool:
    if len(small) > len(big):
        return False
    return all(a == 1 or a == b for a, b in zip(_aligned(small, len(big)), big))


def varies_inner(shape: tuple, S: tuple, k: int) -> bool:
    """Does a value of `shape` (right-aligned into S) vary along the trailing k dims of S?"""
    if k == 0:
        return False
    a = _aligned(shape, len(S))
    return any(a[i] > 1 for i in range(len(S) - k, len(S)))


def clean_inner(shape: tuple, S: tuple, k: int) -> bool:
    """Over the trailing k dims the value is either complete (every dim of S with extent > 1) or constant."""
    if k == 0:
        return True
    a = _aligned(shape, len(S))
    inner = [(a[i], S[i]) for i in range(len(S) - k, len(S)) if S[i] > 1]
    return all(x == s for x, s in inner) or all(x == 1 for x, _ in inner)


def expanded_strides(shape: tuple, strides: tuple | None, target: tuple) -> tuple:
    shape = tuple(shape)
    if strides is None:
        strides = _contig(shape)
    a = _aligned(shape, len(target))
    st = (0,) * (len(target) - len(shape)) + tuple(strides)
    return tuple(0 if (x == 1 and t != 1) else s for x, s, t in zip(a, st, target))


def _contig(shape: tuple) -> tuple:
    out, acc = [], 1
    for s in reversed(tuple(shape)):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


def rowmajor_inner(shape: tuple, strides: tuple | None, S: tuple, k: int) -> bool:
    st = expanded_strides(shape, strides, S)
    acc = 1
    for i in range(len(S) - 1, len(S) - k - 1, -1):
        if S[i] != 1 and st[i] != acc:
            return False
        acc *= S[i]
    return True


# --------------------------------------------------------------------------------------------------- grouping

class _Group:
    def __init__(self, gid: int, prim: Prim, S: tuple, k: int | None):
        self.gid = gid
        self.prims: list[Prim] = [prim]
        self.S = tuple(S)
        self.k = k
        self.form: dict[str, str] = {}  # prim name -> "keep" | "drop"

    @property
    def names(self) -> set:
        return {p.name for p in self.prims}

    @property
    def has_red(self) -> bool:
        return any(p.fn == "red" for p in self.prims)


def _anchor(p: Prim) -> tuple[tuple, int | None]:
    if p.fn == "red":
        return tuple(p.red["in_shape"]), p.red["k"]
    if p.fn == "cat":  # a last-dim concatenation works on rows of the last dim
        return tuple(p.shape), 1
    return tuple(p.shape), None


def _form_of(p: Prim, groups_form: dict) -> str | None:
    """keep / drop for a primitive given its in-group operands' forms; None when they disagree."""
    if p.fn == "red":
        return "keep" if p.red["keepdim"] else "drop"
    forms = {groups_form[d] for d in p.deps if d in groups_form}
    if not forms:
        return "keep"
    return forms.pop() if len(forms) == 1 else None


class Grouper:
    def __init__(self, lowered: Lowered, fuse: bool, isolate: set):
        self.low = lowered
        self.fuse = fuse
        self.isolate = isolate
        self.prims = [it for it in lowered.items if isinstance(it, Prim)]
        self.producer_of = {it.name: it for it in lowered.items}
        self.users: dict[str, set] = {}
        for it in lowered.items:
            for d in it.deps:
                self.users.setdefault(d, set()).add(it.name)
        for o in lowered.output_names:
            self.users.setdefault(o, set()).add("<output>")
        self.anc: dict[str, set] = {}
        for it in lowered.items:
            s = set()
            for d in it.deps:
                s.add(d)
                s |= self.anc.get(d, set())
            self.anc[it.name] = s

    def run(self) -> list[_Group]:
        groups: list[_Group] = []
        of: dict[str, _Group] = {}
        for p in self.prims:
            S, k = _anchor(p)
            target = None
            if self.fuse and p.name not in self.isolate and p.fn != "cat":  # pieces have another row width
                target = self._join(p, of)
            elif not self.fuse:
                prev = next((g for g in groups if g.prims[0].origin == p.origin and p.name not in self.isolate
                             and not (g.prims[0].name in self.isolate)), None)
                if prev is not None and self._compatible(prev, p) and self._acyclic(prev.names | {p.name}):
                    target = prev
            if target is None:
                g = _Group(len(groups), p, S, k)
                g.form[p.name] = _form_of(p, {}) or "keep"
                groups.append(g)
                of[p.name] = g
            else:
                self._add(target, p)
                of[p.name] = target
        return [g for g in groups if g.prims]

    def _add(self, g: _Group, p: Prim) -> None:
        S, k = _anchor(p)
        if p.fn != "red" and g.k is None and tuple(p.shape) != g.S and broadcastable(g.S, tuple(p.shape)):
            g.S = tuple(p.shape)
        if p.fn == "red" and g.k is None:
            g.k = k
        g.prims.append(p)
        g.form[p.name] = _form_of(p, g.form) or "keep"

    def _compatible(self, g: _Group, p: Prim) -> bool:
        form = _form_of(p, g.form)
        if form is None:
            return False
        if p.fn == "red":
            S, k = _anchor(p)
            if any(g.form.get(d) == "drop" for d in p.deps):
                return False
            return S == g.S and (g.k is None or g.k == k)
        shape = tuple(p.shape)
        if form == "keep":
            if shape == g.S:
                return True
            if g.k is not None:
                return broadcastable(shape, g.S) and not varies_inner(shape, g.S, g.k)
            # p is bigger: g's values are computed inside p's kernel, broadcast (a value someone else needs at
            # its own smaller shape is isolated by build_plan's repair loop)
            return broadcastable(g.S, shape) and not g.has_red
        
        # drop form: only inside a row kernel, row-level
        if g.k is None:
            return False
        lead = g.S[:len(g.S) - g.k]
        return broadcastable(shape, lead)

    def _acyclic(self, members: set) -> bool:
        for m in members:
            item = self.producer_of[m]
            for d in item.deps:
                if d not in members and self.anc.get(d, set()) & members:
                    return False
        return True

    @staticmethod
    def _pieces_outside(prims: list) -> bool:
        """A cat's pieces read their values at the piece width: none may be computed in the cat's own kernel."""
        names = {q.name for q in prims}
        return not any(set(_piece_leaves(pc)) & names for q in prims if q.fn == "cat" for pc in q.attrs["pieces"])

    def _join(self, p: Prim, of: dict) -> _Group | None:
        cands = []
        for d in p.deps:
            g = of.get(d)
            if g is not None and g not in cands and not any(q.name in self.isolate for q in g.prims):
                cands.append(g)
        if not cands:
            return None
        # try all candidate groups merged, then each alone (largest first)
        options = ([cands] if len(cands) > 1 else []) + [[g] for g in sorted(cands, key=lambda g: -len(g.prims))]
        for option in options:
            merged = self._merge_view(option)
            if merged is None:
                continue
            if self._compatible(merged, p) and self._acyclic(merged.names | {p.name}) and \
                    self._pieces_outside(merged.prims + [p]):
                if len(option) > 1:
                    base = option[0]
                    for other in option[1:]:
                        for q in other.prims:
                            of[q.name] = base
                        base.prims.extend(other.prims)
                        base.form.update(other.form)
                        other.prims = []
                    base.prims.sort(key=lambda q: self.prims.index(q))
                    base.S, base.k = merged.S, merged.k
                    return base
                return option[0]
        return None

    def _merge_view(self, option: list) -> _Group | None:
        if len(option) == 1:
            return option[0]
        ks = {g.k for g in option if g.k is not None}
        if len(ks) > 1:
            return None
        big = max((g.S for g in option), key=lambda S: (len(S), prod(S)))
        for g in option:
            if g.S != big and (g.k is not None or g.has_red or not broadcastable(g.S, big)):
                return None
        view = _Group(-1, option[0].prims[0], big, ks.pop() if ks else None)
        view.prims = [q for g in option for q in g.prims]
        for g in option:
            view.form.update(g.form)
        return view


# ------------------------------------------------------------------------------------------------ kernel plans

HALF_CTYPES = {"bfloat16": "kf_bf16", "float16": "kf_f16"}  # torch dtype -> C storage type (see exprs.HALF_MATH)


def storage_ctype(dtype: str) -> str:
    """The C type a kernel reads or writes a tensor of this dtype as."""
    return "bool" if dtype == "bool" else HALF_CTYPES.get(dtype, "float")


def _knode(p: Prim, ops: list, level: str, rpass: int = 0) -> KNode:
    return KNode(p.name, p.fn, ops, level, "bool" if p.dtype == "bool" else "float", dict(p.attrs), rpass=rpass,
                 half=p.dtype if p.dtype in HALF_CTYPES else "")


def _choose_k(g: _Group, values: dict, slot_values: list[tuple[str, str]]) -> int:
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


def _plan(g: _Group, index: int, low: Lowered, users: dict, output_names: set, fresh_single_use: set) -> KernelPlan:
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
            for v in _piece_leaves(pc):
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
            s = _piece_slot(len(slots), v, val, lead, int(form[5:]), k)
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
            s = Slot(len(slots), v, "tensor", ctype, inner, mode, drop)
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
                _piece_plan(pc, slot_index) for pc in p.attrs["pieces"]]}))
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
        knodes.append(_knode(p, ops, lv, rpass[p.name]))
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
                      "+".join(labels), shape_slots)


def _piece_leaves(pc: dict) -> list[str]:
    """The external values a cat piece reads (at the piece's width)."""
    inside = {q.name for q in pc["prims"]}
    ops = [o for q in pc["prims"] for o in q.operands] + [pc["root"]]
    out = []
    for o in ops:
        if o[0] == "v" and o[1] not in inside and o[1] not in out:
            out.append(o[1])
    return out


def _piece_slot(index: int, v: str, val, lead: tuple, w: int, k: int) -> Slot:
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


def _piece_plan(pc: dict, slot_index: dict) -> dict:
    """A cat piece as kernel nodes: operands are its own nodes, its slots (at the piece's width) or constants."""
    inside = {q.name for q in pc["prims"]}
    form = f"piece{pc['w']}"

    def op(o):
        if o[0] != "v":
            return o
        return ("node", o[1]) if o[1] in inside else ("slot", slot_index[(o[1], form)])

    nodes = [_knode(q, [op(o) for o in q.operands], "E") for q in pc["prims"]]
    return {"lo": pc["lo"], "w": pc["w"], "nodes": nodes, "root": op(pc["root"])}


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


def _problems(g: _Group, plan: KernelPlan, values: dict) -> list[str]:
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


def build_plan(low: Lowered, fuse: bool) -> ProgramPlan:
    isolate: set = set()
    for _ in range(64):
        grouper = Grouper(low, fuse, isolate)
        groups = grouper.run()
        users = grouper.users
        output_names = set(low.output_names)
        fresh = {it.name for it in low.items if isinstance(it, Py) and it.fresh}
        plans = []
        bad_all = []
        for i, g in enumerate(groups):
            plan = _plan(g, i, low, users, output_names, fresh)
            bad = _problems(g, plan, low.values)
            bad_all.extend(b for b in bad if len(g.prims) > 1)
            plans.append((g, plan))
        if not bad_all:
            break
        isolate |= set(bad_all)
    else:
        raise RuntimeError("kernel grouping did not converge")
    # emission order: topological over units (Py items and kernels), stable in the lowered order
    unit_of: dict[str, object] = {}
    units: list = []
    for it in low.items:
        if isinstance(it, Py):
            units.append(it)
            unit_of[it.name] = it
    for g, plan in plans:
        units.append(plan)
        for m in plan.members:
            unit_of[m] = plan
    order_key = {it.name: i for i, it in enumerate(low.items)}

    def deps_of(u) -> set:
        if isinstance(u, Py):
            names = u.deps
        else:
            names = [s.value for s in u.slots]
        return {id(unit_of[d]) for d in names if d in unit_of and unit_of[d] is not u}

    def key(u) -> int:
        return order_key[u.name] if isinstance(u, Py) else min(order_key[m] for m in u.members)

    pending = sorted(units, key=key)
    done: set = set()
    ordered = []
    while pending:
        for u in pending:
            if deps_of(u) <= done:
                ordered.append(u)
                done.add(id(u))
                pending.remove(u)
                break
        else:
            raise RuntimeError("cycle between kernels")
    kernels = [u for u in ordered if isinstance(u, KernelPlan)]
    for i, kp in enumerate(kernels):
        kp.name = f"kf_k{i}"
    return ProgramPlan(ordered, low, kernels)


__all__ = ["KernelPlan", "KNode", "KOut", "Slot", "ProgramPlan", "build_plan", "FLOAT"]
