"""Metal candidate writer (`platforms.metal.compile_metal`): the shared C-family writer (`cfamily`) in its Metal
dialect (address spaces, `long`, float sums), with Metal's thread indices and threadgroup reductions around it.

Written against platforms/metal.py's documented `compile_metal` API; not yet run on Apple hardware here. The
Metal sources are checked by that platform's pure-Python signature parser in the tests.
"""

from __future__ import annotations

from . import emit
from .base import Backend
from .cpu import signature as cpu_signature
from .cfamily import COMMON_FNS, ERF_TAIL, IDENT, METAL, CWriter, math_wrappers, row_offset_fn
from ..plan.passes import row_program
from ..plan.plans import KernelPlan
from ..schedule import Schedule

# Metal's precise:: math where it has it; erf (none in MSL), log1p and expm1 (none precise) written out
_METAL_ERF = r"""
static inline float kf_erf(float x) {
    const float ax = fabs(x);
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    const float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t
                     + 0.254829592f) * t;
    const float r = 1.0f - p * precise::exp(-ax * ax);
""" + ERF_TAIL + r"""
static inline float kf_log1p(float x) { return fabs(x) < 1e-4f ? x * (1.0f - 0.5f * x) : precise::log(1.0f + x); }
static inline float kf_expm1(float x) { return fabs(x) < 1e-5f ? x + 0.5f * x * x : precise::exp(x) - 1.0f; }
"""
METAL_PRELUDE = ("#include <metal_stdlib>\nusing namespace metal;\n" + math_wrappers(METAL, ("exp", "log", "tanh"))
                 + _METAL_ERF.lstrip("\n") + math_wrappers(METAL, COMMON_FNS) + row_offset_fn(METAL))


def _metal_params(plan: KernelPlan) -> tuple[list[str], list[str]]:
    """(declarations with [[buffer(i)]], roles) in call order."""
    decls, roles = [], []
    for i, (decl, role) in enumerate(cpu_signature(plan, Schedule())):
        kind = role.partition(":")[0]
        name = decl.split()[-1]
        if kind == "slot":
            ctype = plan.slots[int(role.partition(":")[2])].ctype
            d = f"device const {ctype}* {name}"
        elif kind == "out":
            d = f"device {plan.outputs[int(role.partition(':')[2])].dtype}* {name}"
        elif kind == "meta":
            d = "device const long* meta"
        elif kind in ("rows", "cols"):
            d = f"constant long& {kind}"
        else:
            d = f"constant float& {name}"
        decls.append(f"{d} [[buffer({i})]]")
        roles.append(role)
    return decls, roles


def metal_threads(plan: KernelPlan, sched: Schedule) -> int:
    return 1024 if sched.block else 256


class MetalWriter(CWriter):
    dialect = METAL


def metal_kernel(plan: KernelPlan, sched: Schedule) -> str:
    e = MetalWriter(plan, sched)
    decls, _ = _metal_params(plan)
    prog = row_program(plan, cache_rows=False)
    block = plan.npasses > 0 and (sched.parallel or sched.warp_reduce)
    if plan.npasses == 0:
        decls.append("uint2 gid [[thread_position_in_grid]]")
    elif block:
        decls += ["uint2 tid [[thread_position_in_threadgroup]]", "uint2 tgid [[threadgroup_position_in_grid]]",
                  "uint2 tsize [[threads_per_threadgroup]]"]
    else:
        decls.append("uint gid [[thread_position_in_grid]]")
    e.w(0, f"// {plan.label}")
    e.w(0, f"kernel void {plan.name}(" + ",\n    ".join(decls) + ") {")
    if plan.npasses == 0:
        e.w(1, "const long r = (long)gid.y;")
        e.w(1, "const long c = (long)gid.x;")
        e.w(1, "if (r >= rows || c >= cols) return;")
        e.row_begin(1, prog)
        for loop in prog.loops:
            e.body(1, loop)
        e.store_row_outputs(1, guard="if (c == 0) ")
    elif not block:
        e.w(1, "const long r = (long)gid;")
        e.w(1, "if (r >= rows) return;")
        e.row_begin(1, prog)
        e.serial_row(1, prog)
    else:
        e.w(1, "threadgroup float kf_sh[1024];")
        e.w(1, "const long r = (long)tgid.y;")
        e.w(1, "const uint t = tid.x;")
        e.w(1, "const uint nt = tsize.x;")
        e.w(1, "if (r >= rows) return;")
        e.row_begin(1, prog)
        e.serial_row(1, prog, guard="if (t == 0u) ", lo="t", step="c += nt",
                     finish=lambda d, reds: _group_reduce(e, d, reds))
    e.w(0, "}")
    return e.text()


def _group_reduce(e: MetalWriter, d: int, reds: list[str]) -> None:
    """Each reduction's thread accumulators combined across the threadgroup (SIMD-group reductions first under
    `warp_reduce`, else a shared-memory tree), its value read by every thread."""
    for r in reds:
        op = e.by[r].red["op"]
        comb = {"sum": "a + b", "mean": "a + b", "max": "(b > a ? b : a)", "min": "(b < a ? b : a)"}[op]
        simd = {"sum": "simd_sum", "mean": "simd_sum", "max": "simd_max", "min": "simd_min"}[op]
        if e.sched.warp_reduce:
            e.w(d, f"acc_{r} = {simd}(acc_{r});")
            e.w(d, f"if ((t & 31u) == 0u) kf_sh[t >> 5] = acc_{r};")
            e.w(d, "threadgroup_barrier(mem_flags::mem_threadgroup);")
            e.w(d, "if (t == 0u) {")
            e.w(d + 1, f"float a = {IDENT[op]};")
            e.w(d + 1, "for (uint w = 0; w < (nt + 31u) / 32u; ++w) {")
            e.w(d + 2, f"const float b = kf_sh[w]; a = {comb};")
            e.w(d + 1, "}")
            e.w(d + 1, "kf_sh[0] = a;")
            e.w(d, "}")
        else:
            e.w(d, f"kf_sh[t] = acc_{r};")
            e.w(d, "threadgroup_barrier(mem_flags::mem_threadgroup);")
            e.w(d, "for (uint s = nt >> 1; s > 0u; s >>= 1) {")
            e.w(d + 1, "if (t < s) {")
            e.w(d + 2, f"const float a = kf_sh[t]; const float b = kf_sh[t + s]; kf_sh[t] = {comb};")
            e.w(d + 1, "}")
            e.w(d + 1, "threadgroup_barrier(mem_flags::mem_threadgroup);")
            e.w(d, "}")
        e.w(d, "threadgroup_barrier(mem_flags::mem_threadgroup);")
        div = " / (float)cols" if op == "mean" else ""
        e.w(d, f"const float {e.var(r)} = kf_sh[0]{div};")
        e.w(d, "threadgroup_barrier(mem_flags::mem_threadgroup);")


def metal_launch_lines(plan: KernelPlan, names: dict, sched: Schedule) -> emit.Launch:
    lines, outs, args = emit.prep_lines(plan, names)
    call_lines: list[str] = []
    _, roles = _metal_params(plan)
    call = [args[role] for role in roles]
    if plan.npasses == 0:
        lines.append("gx = max(1, min(cols, 256))")
        call_lines.append(f"self.kf_lib.{plan.name}({', '.join(call)}, threads=(max(1, cols), max(1, rows)), "
                          f"group_size=(gx, max(1, 256 // gx)))")
    elif sched.parallel or sched.warp_reduce:
        t = metal_threads(plan, sched)
        call_lines.append(f"self.kf_lib.{plan.name}({', '.join(call)}, threads=({t}, max(1, rows)), "
                          f"group_size=({t}, 1))")
    else:
        call_lines.append(f"self.kf_lib.{plan.name}({', '.join(call)}, threads=(max(1, rows),), "
                          f"group_size=(max(1, min(rows, 256)),))")
    return emit.Launch(lines, outs, call_lines)


class MetalBackend(Backend):
    kind = "metal"
    device_type = "mps"

    def program(self, plan, desc, sched, target, header, marker):
        src = "\n".join([METAL_PRELUDE.strip()] + [metal_kernel(k, sched) for k in plan.kernels])
        return emit.candidate(plan, desc, header=header + "\n(Metal writer: not yet run on Apple hardware.)",
                              marker=marker, imports=[f"from {target.module} import compile_metal"],
                              source_name="SOURCE", source_text=src,
                              init_tail=["self.kf_lib = compile_metal(SOURCE)"],
                              launch=lambda kp, names: metal_launch_lines(kp, names, sched))
