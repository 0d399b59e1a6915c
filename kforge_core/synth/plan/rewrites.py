"""Named plan rewrites a backend may ask for (`Backend.rewrites`): each takes a `ProgramPlan` and returns the plan
its kernels will run, the plan itself where the rewrite does not apply. They live here, not in a writer, because
they change which kernels exist or what a kernel computes per pass, which is plan structure any writer can honour.

- `group_norm_pipeline`: a recorded GroupNorm's statistics kernel folded into its elementwise kernel, which then
  computes the statistics itself (`KernelPlan.pipeline`; written by the CUDA writer's `cuda/pipeline`).
- `variance_fold`: per row kernel, the passes that only sum squared deviations from the previous pass's mean
  (`KernelPlan.variance_folds`); a writer streaming the row may fold each into its mean's pass.
"""

from __future__ import annotations

from dataclasses import replace

from ..lower.graph import Py
from .passes import row_program
from .plans import KernelPlan, ProgramPlan


def apply(pp: ProgramPlan, names: tuple[str, ...]) -> ProgramPlan:
    """The plan with the named rewrites applied in order; an unknown name is a programming error."""
    for name in names:
        if name not in REWRITES:
            raise ValueError(f"unknown plan rewrite {name!r} (known: {', '.join(REWRITES)})")
        pp = REWRITES[name](pp)
    return pp


# --------------------------------------------------------------------------------------- group_norm_pipeline

def group_norm_pipeline(pp: ProgramPlan) -> ProgramPlan:
    """Each recorded GroupNorm's statistics kernel folded into its elementwise kernel, where the structure allows:
    the plan holds its statistics kernel (only those two outputs) and one elementwise kernel reading x as dense
    float rows plus the two spread statistics, and nothing else reads the statistics. The statistics kernel and the
    spreading glue are dropped; the elementwise kernel takes the statistics as `stat` slots it computes itself."""
    for desc in pp.lowered.pipelines:
        if desc.get("kind") == "group_norm":
            pp = _fold_group_norm(pp, desc)
    return pp


def _fold_group_norm(pp: ProgramPlan, desc: dict) -> ProgramPlan:
    stats = {desc["mean"], desc["rstd"]}
    spread = {desc["mean_rows"]: "mean", desc["rstd_rows"]: "rstd"}
    k0 = next((k for k in pp.kernels if k.npasses and {o.node for o in k.outputs} == stats
               and all(o.level == "R" for o in k.outputs)), None)
    if k0 is None or stats & set(pp.lowered.output_names) or set(spread) & set(pp.lowered.output_names):
        return pp
    k1 = None
    for k in pp.kernels:
        if k.npasses or k.nl != 2 or any(o.level != "E" or o.inplace_slot is not None for o in k.outputs):
            continue
        by_value = {s.value: s for s in k.slots if s.kind == "tensor"}
        x = by_value.get(desc["x"])
        if x is None or x.inner != 1 or x.mode != "rowmajor" or x.ctype != "float" or x.drop:
            continue
        if all(v in by_value and by_value[v].inner == 0 and by_value[v].mode == "rowmajor" and not by_value[v].drop
               for v in spread):
            k1 = k
            break
    if k1 is None:
        return pp
    # nothing but k1 may read the spread statistics, and nothing but their glue the statistics themselves
    for u in pp.units:
        if u is k0 or u is k1:
            continue
        reads = set(u.deps) if isinstance(u, Py) else {s.value for s in u.slots}
        if reads & set(spread) or (reads & stats and not (isinstance(u, Py) and u.name in spread)):
            return pp
    slots = [replace(s, kind="stat") if s.kind == "tensor" and s.value in spread else s for s in k1.slots]
    stat_idx = {spread[s.value]: s.index for s in slots if s.kind == "stat"}
    x_idx = next(s.index for s in slots if s.kind == "tensor" and s.value == desc["x"])
    folded = replace(k1, slots=slots, shape_slots=[i for i in k1.shape_slots if slots[i].kind == "tensor"],
                     label=f"{k1.label} (statistics pipelined in)",
                     pipeline={"x": x_idx, "mean": stat_idx["mean"], "rstd": stat_idx["rstd"],
                               "per_row": int(desc["per_row"]), "eps": float(desc["eps"])})
    units = []
    for u in pp.units:
        if u is k0 or (isinstance(u, Py) and u.name in spread):
            continue
        units.append(folded if u is k1 else u)
    kernels = [u for u in units if isinstance(u, KernelPlan)]
    for i, kp in enumerate(kernels):
        kp.name = f"kf_k{i}"
    return ProgramPlan(units, pp.lowered, kernels)


# ------------------------------------------------------------------------------------------------ variance_fold

def variance_fold(pp: ProgramPlan) -> ProgramPlan:
    """Each row kernel with foldable variance passes, annotated with them (`KernelPlan.variance_folds`).

    A pass of `sum/mean((u - mean(u))^2)` (LayerNorm's, GroupNorm's, var's and std's variance) reads the row again
    after its mean's pass. A thread streaming a long row can instead sum u and u^2 in one pass, in double, and take
    var = E[u^2] - E[u]^2: the cancellation loses about log10(mean^2 / var) of double's 16 digits, far inside the
    fp32 tolerance (a float sum would lose them from fp32's 7). So this is an annotation a writer may honour where
    its sums are double (the CUDA writer's streaming passes: GroupNorm then reads its input twice instead of three
    times; docs/PERF_NOTES.md), not a change every writer must make."""
    swap = {}
    for k in pp.kernels:
        folds = _variance_passes(k) if k.npasses >= 2 else {}
        if folds:
            swap[id(k)] = replace(k, variance_folds=folds)
    if not swap:
        return pp
    return ProgramPlan([swap.get(id(u), u) for u in pp.units], pp.lowered, [swap.get(id(k), k) for k in pp.kernels])


def _variance_passes(plan: KernelPlan) -> dict[int, tuple[str, str]]:
    """Passes that only reduce squared deviations from the previous pass's mean: {pass: (mean, squares reduction)}."""
    by = {n.name: n for n in plan.nodes}
    out: dict[int, tuple[str, str]] = {}
    loops = {lp.index: lp for lp in row_program(plan, cache_rows=False).loops if lp.kind == "pass"}
    for idx, lp in loops.items():
        prev = loops.get(idx - 1)
        if prev is None or len(lp.reds) != 1 or (idx - 1) in out:
            continue
        r2 = by[lp.reds[0]]
        if r2.red["op"] not in ("sum", "mean") or r2.operands[0][0] != "node":
            continue
        sq = by[r2.operands[0][1]]
        if sq.fn != "mul" or sq.operands[0] != sq.operands[1] or sq.operands[0][0] != "node":
            continue
        dev = by[sq.operands[0][1]]
        if dev.fn != "sub" or dev.operands[1][0] != "node" or sq.half or dev.half:
            continue
        mean = by[dev.operands[1][1]]
        u = dev.operands[0]
        if mean.fn != "red" or mean.red["op"] != "mean" or mean.name not in prev.reds or mean.operands[0] != u:
            continue
        if set(lp.compute) - set(prev.compute) != {dev.name, sq.name} or not set(lp.slots) <= set(prev.slots):
            continue
        out[idx] = (mean.name, r2.name)
    return out


REWRITES = {"group_norm_pipeline": group_norm_pipeline, "variance_fold": variance_fold}
