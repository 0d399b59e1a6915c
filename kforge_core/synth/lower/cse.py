"""Common-subexpression elimination over lowered primitives: `merge_duplicates(lowered)`.

Composite operators expand into primitives on their own, so a module that writes `x - x.mean(-1)` next to
`x.std(-1)` computes the row mean twice, and `x - mean` twice: one more reduction (a block-wide barrier on a GPU,
one more pass where the row is not cached) for nothing. Primitives are pure functions of their operands, so a
primitive equal to an earlier one (same function, operands, shape, dtype, attributes and reduction) is dropped and
its readers read the earlier one.

A primitive stays, duplicate or not, when something other than a primitive's operand list names it: a forward
output, a PyTorch call in `forward` (its code names the variable), or a `cat` piece (pieces hold their own
primitives). Renaming those would mean rewriting code, for a case no gallery problem has.
"""

from __future__ import annotations

from .ir import Lowered, Prim, Py


def _pinned(lowered: Lowered) -> set[str]:
    names = set(lowered.output_names)
    for it in lowered.items:
        if isinstance(it, Py):
            names.update(it.deps)
        elif it.fn == "cat":
            names.update(o[1] for o in it.operands if o[0] == "v")
            for piece in it.attrs["pieces"]:
                names.add(piece["root"][1])
                for q in piece["prims"]:
                    names.add(q.name)
                    names.update(q.deps)
    return names


def _key(p: Prim) -> tuple:
    return (p.fn, tuple(p.operands), tuple(p.shape), p.dtype, repr(sorted(p.attrs.items())),
            repr(sorted(p.red.items())) if p.red else None)


def merge_duplicates(lowered: Lowered) -> int:
    """Drop primitives equal to an earlier one, in place; returns how many were dropped."""
    pinned = _pinned(lowered)
    first: dict[tuple, str] = {}
    renamed: dict[str, str] = {}
    items = []
    for it in lowered.items:
        if isinstance(it, Prim) and it.fn != "cat":
            if renamed:
                it.operands = [("v", renamed.get(o[1], o[1])) if o[0] == "v" else o for o in it.operands]
            key = _key(it)
            if key in first and it.name not in pinned:
                renamed[it.name] = first[key]
                continue
            first.setdefault(key, it.name)
        items.append(it)
    lowered.items = items
    return len(renamed)
