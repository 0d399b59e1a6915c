"""Fusion decisions: which primitives share a kernel.

`Grouper` walks the lowered primitives in topological order. Unfused, a traced node's primitives stay together;
fused, a primitive joins the group(s) of its producers when the row spaces agree (`_compatible`), the merge makes
no cycle between kernels (`_acyclic`) and no `cat` piece would be computed inside its own cat's kernel. Each group
records its element shape `S`, its row width `k` (fixed by a reduction or a cat, else chosen later) and each
member's form: "keep" (full rank) or "drop" (a reduction result without keepdim, and what is computed from it).
"""

from __future__ import annotations

from math import prod

from .cat_pieces import piece_leaves
from ..lower.graph import Lowered, Prim
from .rowspace import broadcastable, varies_inner


class Group:
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


def _col_k(p: Prim) -> int | None:
    """The row width a primitive reading its column index (`("col",)`) was lowered for: only a kernel with that
    width gives it the right index."""
    return p.attrs["row_k"] if any(o[0] == "col" for o in p.operands) else None


def _anchor(p: Prim) -> tuple[tuple, int | None]:
    if p.fn == "red":
        return tuple(p.red["in_shape"]), p.red["k"]
    if _col_k(p) is not None:
        return tuple(p.shape), _col_k(p)
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

    def run(self) -> list[Group]:
        groups: list[Group] = []
        of: dict[str, Group] = {}
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
                g = Group(len(groups), p, S, k)
                g.form[p.name] = _form_of(p, {}) or "keep"
                groups.append(g)
                of[p.name] = g
            else:
                self._add(target, p)
                of[p.name] = target
        return [g for g in groups if g.prims]

    def _add(self, g: Group, p: Prim) -> None:
        S, k = _anchor(p)
        if p.fn != "red" and g.k is None and tuple(p.shape) != g.S and broadcastable(g.S, tuple(p.shape)):
            g.S = tuple(p.shape)
        if (p.fn == "red" or _col_k(p) is not None) and g.k is None:
            g.k = k
        g.prims.append(p)
        g.form[p.name] = _form_of(p, g.form) or "keep"

    def _compatible(self, g: Group, p: Prim) -> bool:
        form = _form_of(p, g.form)
        if form is None:
            return False
        if p.fn == "red":
            S, k = _anchor(p)
            if any(g.form.get(d) == "drop" for d in p.deps):
                return False
            return S == g.S and (g.k is None or g.k == k)
        shape = tuple(p.shape)
        if _col_k(p) is not None and (shape != g.S or g.k not in (None, _col_k(p))):
            return False
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
        return not any(set(piece_leaves(pc)) & names for q in prims if q.fn == "cat" for pc in q.attrs["pieces"])

    def _join(self, p: Prim, of: dict) -> Group | None:
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

    def _merge_view(self, option: list) -> Group | None:
        if len(option) == 1:
            return option[0]
        ks = {g.k for g in option if g.k is not None}
        if len(ks) > 1:
            return None
        big = max((g.S for g in option), key=lambda S: (len(S), prod(S)))
        for g in option:
            if g.S != big and (g.k is not None or g.has_red or not broadcastable(g.S, big)):
                return None
        view = Group(-1, option[0].prims[0], big, ks.pop() if ks else None)
        view.prims = [q for g in option for q in g.prims]
        for g in option:
            view.form.update(g.form)
        return view
