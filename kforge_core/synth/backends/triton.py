"""Triton candidate writer (`@triton.jit` kernels launched from `ModelNew.forward`).

Same kernel plans as the CPU writer (row space, element- and row-level values, reduction passes); the schedule
knobs mean: elementwise kernels are one program per (row, block of columns); row kernels one program per row that
loops over the row in blocks; `block_shape` uses 4x larger blocks and 8 warps; `unroll` pipelines the row loops
(`num_stages`). Moves that do not change a Triton program are skipped by the generator.
"""

from __future__ import annotations

from . import emit
from .base import Backend
from .columns_triton import triton_launch, triton_source
from .cpu import signature as cpu_signature
from .triton_exprs import TritonUnsupported, plit, triton_expr
from ..plan.passes import row_program
from ..plan.plans import KernelPlan
from ..schedule import Schedule

def triton_kernel(plan: KernelPlan, sched: Schedule) -> str:
    by = {n.name: n for n in plan.nodes}
    general = [s.index for s in plan.slots if s.kind == "tensor" and s.mode == "general"]
    prog = row_program(plan, cache_rows=False)
    lines: list[str] = []

    def w(d, t):
        lines.append("    " * d + t)

    def var(name):
        return "v_" + name.replace(".", "_")

    def operand(o):
        if o[0] == "slot":
            s = plan.slots[o[1]]
            return f"s{s.index}" if s.kind == "scalar" else (f"x{s.index}" if s.inner == 1 else f"r{s.index}")
        if o[0] == "node":
            return var(o[1])
        if o[0] == "c":
            return plit(o[1])
        if o[0] == "col":
            return "c.to(tl.float32)"
        return f"(cols - {float(o[1])!r})"

    params = []
    for _, role in cpu_signature(plan, Schedule()):
        kind, _, idx = role.partition(":")
        params.append({"slot": f"a{idx}", "out": f"o{idx}", "meta": "kmeta", "rows": "rows", "cols": "cols",
                       "scalar": f"s{idx}"}[kind])
    w(0, "@triton.jit")
    w(0, f"def {plan.name}({', '.join(params)}, BLOCK: tl.constexpr):")
    w(1, f"# {plan.label}")

    def setup(d, r):
        for s in plan.slots:
            if s.kind != "tensor":
                continue
            if s.mode == "rowmajor":
                off = f"{r} * cols" if s.inner == 1 else r
            elif s.mode == "zero":
                off = "0"
            else:
                gi = general.index(s.index)
                w(d, f"off{s.index} = {r} * 0")
                w(d, f"rr{s.index} = {r}")
                w(d, f"for i in tl.static_range({plan.nl}):")
                w(d + 1, f"n{s.index} = tl.load(kmeta + ({plan.nl - 1} - i))")
                base = plan.nl + gi * plan.nl + plan.nl - 1
                w(d + 1, f"off{s.index} += (rr{s.index} % n{s.index}) * tl.load(kmeta + {base} - i)")
                w(d + 1, f"rr{s.index} = rr{s.index} // n{s.index}")
                off = f"off{s.index}"
            w(d, f"p{s.index} = a{s.index} + {off}")
            if s.inner == 0:
                w(d, f"r{s.index} = tl.load(p{s.index})")
        for j, o in enumerate(plan.outputs):
            if o.level == "E":
                w(d, f"q{j} = o{j} + {r} * cols")

    def row_nodes(d, names):
        for name in names:
            w(d, f"{var(name)} = {triton_expr(by[name], operand)}")

    def body(d, loop):
        for si in loop.slots:
            w(d, f"x{si} = tl.load(p{si} + c, mask=m, other=0)")
        for name in loop.compute:
            w(d, f"{var(name)} = {triton_expr(by[name], operand)}")
        for r in loop.reds:
            n = by[r]
            src = operand(n.operands[0])
            op = n.red["op"]
            if op in ("sum", "mean"):
                w(d, f"acc_{r} += tl.where(m, {src}, 0.0)")
            elif op == "max":
                w(d, f"acc_{r} = tl.maximum(acc_{r}, tl.where(m, {src}, float('-inf')))")
            else:
                w(d, f"acc_{r} = tl.minimum(acc_{r}, tl.where(m, {src}, float('inf')))")
        for j in loop.outputs:
            w(d, f"tl.store(q{j} + c, {var(plan.outputs[j].node)}, mask=m)")

    if plan.npasses == 0:
        w(1, "pid = tl.program_id(0).to(tl.int64)")
        w(1, "nch = tl.cdiv(cols, BLOCK)")
        w(1, "r = pid // nch")
        w(1, "c = (pid - r * nch) * BLOCK + tl.arange(0, BLOCK)")
        w(1, "m = c < cols")
        setup(1, "r")
        row_nodes(1, prog.row_nodes_by_pass.get(0, []))
        for loop in prog.loops:
            body(1, loop)
        for j, o in enumerate(plan.outputs):
            if o.level == "R":
                w(1, "if pid - r * nch == 0:")
                w(2, f"tl.store(o{j} + r, {var(o.node)})")
    else:
        w(1, "r = tl.program_id(0).to(tl.int64)")
        setup(1, "r")
        row_nodes(1, prog.row_nodes_by_pass.get(0, []))
        stages = ", num_stages=3" if sched.unroll else ""
        for loop in prog.loops:
            if loop.kind == "pass":
                for r in loop.reds:
                    op = by[r].red["op"]
                    init = {"sum": "0.0", "mean": "0.0", "max": "float('-inf')", "min": "float('inf')"}[op]
                    w(1, f"acc_{r} = tl.full([BLOCK], {init}, tl.float32)")
            w(1, f"for c0 in tl.range(0, cols, BLOCK{stages}):")
            w(2, "c = c0 + tl.arange(0, BLOCK)")
            w(2, "m = c < cols")
            body(2, loop)
            if loop.kind == "pass":
                for r in loop.reds:
                    op = by[r].red["op"]
                    red = {"sum": "tl.sum", "mean": "tl.sum", "max": "tl.max", "min": "tl.min"}[op]
                    div = " / (cols + 0.0)" if op == "mean" else ""
                    w(1, f"{var(r)} = {red}(acc_{r}, axis=0){div}")
                row_nodes(1, prog.row_nodes_by_pass.get(loop.index, []))
        for j, o in enumerate(plan.outputs):
            if o.level == "R":
                w(1, f"tl.store(o{j} + r, {var(o.node)})")
    return "\n".join(lines) + "\n"


def triton_launch_lines(plan: KernelPlan, names: dict, sched: Schedule) -> emit.Launch:
    lines, outs, args = emit.prep_lines(plan, names)
    call = [args[role] for _, role in cpu_signature(plan, Schedule())]
    scale = 4 if sched.block else 1
    warps = 8 if sched.block else 4
    if plan.npasses == 0:
        block = 1024 * scale
        lines.append(f"grid = (max(1, rows * triton.cdiv(cols, {block})),)")
    else:
        block = 256 * scale
        lines.append("grid = (max(1, rows),)")
    return emit.Launch(lines, outs, [f"{plan.name}[grid]({', '.join(call)}, BLOCK={block}, num_warps={warps})"])


class TritonBackend(Backend):
    kind = "triton"
    device_type = "cuda"
    column_kernels = True

    def program(self, plan, desc, sched, target, header, marker):
        try:
            kernels = [triton_kernel(k, sched) for k in plan.kernels]
        except TritonUnsupported as e:
            raise ValueError(f"the Triton writer cannot express this graph: {e}") from None
        return emit.candidate(plan, desc, header=header, marker=marker,
                              imports=["import triton", "import triton.language as tl"], source_name=None,
                              source_text="\n\n".join(kernels + ([triton_source(plan.columns)] if plan.columns
                                                                   else [])), init_tail=[],
                              launch=lambda kp, names: triton_launch_lines(kp, names, sched),
                              columns=triton_launch)
