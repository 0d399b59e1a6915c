"""Group primitives into kernels and describe each kernel as a backend-independent `KernelPlan`.

A kernel works on a *row space*: the element shape `S` viewed as `rows x cols`, where `cols` is the product of the
trailing `k` dimensions. Every value inside a kernel is either element-level (`E`, varies along the row) or
row-level (`R`, one value per row: reduction results, per-row operands, anything computed only from those).
Reductions run over the row; a kernel with reductions makes one pass over the row per dependent reduction level,
then a final pass that writes its element-level outputs.

Unfused (`fuse=False`): one kernel per traced node (a composite such as softmax is still one kernel).
Fused: greedy, in topological order, a primitive joins the kernel(s) of its producers when the row spaces agree
and merging creates no cycle; kernels are emitted in a topological order of the units. Before that, elementwise
chains around column and window kernels are moved into them (`col_fusion`).

This module drives the parts: `grouping` (which primitives share a kernel), `planning` (a group as a `KernelPlan`;
with `cat_pieces` for concatenations and `rowspace` for the shape arithmetic) and `plans` (the plan data types,
re-exported here). `build_plan` isolates primitives a kernel cannot write at their own shape until the grouping
converges, then orders the units.
"""

from __future__ import annotations

from ..lower.colops import ColOp
from ..lower.graph import FLOAT, Lowered, Py
from .col_fusion import fuse_column_chains
from .grouping import Grouper
from .planning import plan_kernel, plan_problems
from .plans import KernelPlan, KNode, KOut, ProgramPlan, Slot


def build_plan(low: Lowered, fuse: bool) -> ProgramPlan:
    if fuse:  # elementwise chains around column and window kernels go into them
        low = fuse_column_chains(low)
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
            plan = plan_kernel(g, i, low, users, output_names, fresh)
            bad = plan_problems(g, plan, low.values)
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
    for i, col in enumerate(u for u in ordered if isinstance(u, ColOp)):
        col.kname = f"kf_c{i}"
    return ProgramPlan(ordered, low, kernels)


__all__ = ["KernelPlan", "KNode", "KOut", "Slot", "ProgramPlan", "build_plan", "FLOAT"]
