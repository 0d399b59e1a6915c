"""The per-row loop structure of a kernel plan: which element-level nodes each pass over the row computes, reduces,
stores and keeps in a row cache. Every backend walks it; the plan rewrites (`plan.rewrites`) read it too, so it
lives with the plans rather than with any one writer."""

from __future__ import annotations

from dataclasses import dataclass, field

from .plans import KernelPlan

# node functions worth keeping in a row cache rather than recomputing in a later pass (the CPU writer's `block`)
EXPENSIVE = {"exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "erf", "erfc", "sin", "cos", "tan", "atan",
             "sinh", "cosh", "asin", "acos", "sigmoid", "tanh", "silu", "gelu", "gelu_tanh", "mish", "selu", "elu",
             "celu", "softplus", "pow"}


def has_cat(plan: KernelPlan) -> bool:
    return any(n.fn == "cat" for n in plan.nodes)


@dataclass
class Loop:
    """One pass over the row: which element-level nodes it computes, reduces, stores and caches."""

    kind: str  # "pass" | "final"
    index: int  # pass number (1..P) or P+1 for the final pass
    compute: list[str] = field(default_factory=list)  # E nodes computed here, in plan order
    load: list[str] = field(default_factory=list)  # E nodes read back from the row cache
    store_cache: list[str] = field(default_factory=list)  # E nodes written to the row cache here
    reds: list[str] = field(default_factory=list)  # reductions accumulated here
    outputs: list[int] = field(default_factory=list)  # indexes into plan.outputs (E-level) stored here
    slots: list[int] = field(default_factory=list)  # element-level tensor slots read here


@dataclass
class RowProgram:
    loops: list[Loop]
    row_nodes_by_pass: dict  # pass -> [R-level non-reduction nodes computed after that pass]
    row_slots: list[int]  # tensor slots with inner == 0 (loaded once per row)
    cached: list[str]  # E nodes kept in the per-thread row cache


def row_program(plan: KernelPlan, cache_rows: bool) -> RowProgram:
    by = {n.name: n for n in plan.nodes}
    order = {n.name: i for i, n in enumerate(plan.nodes)}
    row_nodes: dict[int, list[str]] = {}
    for n in plan.nodes:
        if n.level == "R" and n.fn != "red":
            row_nodes.setdefault(n.rpass, []).append(n.name)
    loops: list[Loop] = []
    for p in range(1, plan.npasses + 1):
        loops.append(Loop("pass", p, reds=[n.name for n in plan.nodes if n.red and n.red["pass"] == p]))
    e_outs = [i for i, o in enumerate(plan.outputs) if o.level == "E"]
    if e_outs:
        loops.append(Loop("final", plan.npasses + 1, outputs=e_outs))

    def expensive(name: str, seen=None) -> bool:
        n = by[name]
        if n.fn in EXPENSIVE:
            return True
        return any(o[0] == "node" and by[o[1]].level == "E" and expensive(o[1]) for o in n.operands)

    computed_before: set = set()
    cached: list[str] = []
    for loop in loops:
        targets = [by[r].operands[0] for r in loop.reds] + [("node", plan.outputs[i].node) for i in loop.outputs]
        compute: set = set()
        load: set = set()
        slots: set = set()

        def visit(o):
            if o[0] == "slot":
                s = plan.slots[o[1]]
                if s.kind == "tensor" and s.inner == 1:
                    slots.add(o[1])
                return
            if o[0] != "node":
                return
            n = by[o[1]]
            if n.level != "E" or n.name in compute or n.name in load:
                return
            if cache_rows and n.name in computed_before and expensive(n.name):
                load.add(n.name)
                if n.name not in cached:
                    cached.append(n.name)
                return
            compute.add(n.name)
            for x in n.operands:
                visit(x)

        for t in targets:
            visit(t)
        loop.compute = sorted(compute, key=order.get)
        loop.load = sorted(load, key=order.get)
        loop.slots = sorted(slots)
        computed_before |= compute
    for loop in loops:
        loop.store_cache = [n for n in loop.compute if n in cached]
    # a cached node is stored in the first loop computing it; drop duplicate stores in later loops
    stored: set = set()
    for loop in loops:
        loop.store_cache = [n for n in loop.store_cache if n not in stored]
        stored |= set(loop.store_cache)
    return RowProgram(loops, row_nodes, plan.row_slots, cached)
