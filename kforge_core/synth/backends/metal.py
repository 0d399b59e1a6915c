"""Metal candidate writer (`platforms.metal.compile_metal`); kernel bodies come from the CUDA writer's
`CudaEmitter`, with Metal address spaces, thread indices and threadgroup reductions around them.

Written against platforms/metal.py's documented `compile_metal` API; not yet run on Apple hardware here. The
Metal sources are checked by that platform's pure-Python signature parser in the tests.
"""

from __future__ import annotations

from . import emit
from . import Backend
from .cpu import signature as cpu_signature
from .cuda.emitter import IDENT, CudaEmitter
from .cexprs import row_program
from ..plan.plans import KernelPlan
from ..schedule import Schedule

METAL_PRELUDE = r"""
#include <metal_stdlib>
using namespace metal;
static inline float kf_exp(float x) { return precise::exp(x); }
static inline float kf_log(float x) { return precise::log(x); }
static inline float kf_tanh(float x) { return precise::tanh(x); }
static inline float kf_erf(float x) {
    const float ax = fabs(x);
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    const float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t
                     + 0.254829592f) * t;
    const float r = 1.0f - p * precise::exp(-ax * ax);
    const float z = x * x;
    const float taylor = x * (1.12837916709551257f + z * (-0.376126389031837524f + z * (0.112837916709551257f
                         + z * -0.0268661706451312522f)));
    return ax < 0.25f ? taylor : (x < 0.0f ? -r : r);
}
static inline float kf_log1p(float x) { return fabs(x) < 1e-4f ? x * (1.0f - 0.5f * x) : precise::log(1.0f + x); }
static inline float kf_expm1(float x) { return fabs(x) < 1e-5f ? x + 0.5f * x * x : precise::exp(x) - 1.0f; }
static inline float kf_fabs(float x) { return fabs(x); }
static inline float kf_sqrt(float x) { return precise::sqrt(x); }
static inline float kf_pow(float a, float b) { return precise::pow(a, b); }
static inline float kf_sin(float x) { return precise::sin(x); }
static inline float kf_cos(float x) { return precise::cos(x); }
static inline float kf_tan(float x) { return precise::tan(x); }
static inline float kf_atan(float x) { return precise::atan(x); }
static inline float kf_sinh(float x) { return precise::sinh(x); }
static inline float kf_cosh(float x) { return precise::cosh(x); }
static inline float kf_asin(float x) { return precise::asin(x); }
static inline float kf_acos(float x) { return precise::acos(x); }
static inline float kf_floor(float x) { return floor(x); }
static inline float kf_ceil(float x) { return ceil(x); }
static inline float kf_rint(float x) { return rint(x); }
static inline float kf_trunc(float x) { return trunc(x); }
static inline long kf_off(long r, device const long* shape, device const long* st, int nl) {
    long off = 0;
    for (int d = nl - 1; d >= 0; --d) {
        const long n = shape[d];
        off += (r % n) * st[d];
        r /= n;
    }
    return off;
}
"""


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


def metal_kernel(plan: KernelPlan, sched: Schedule) -> str:
    e = CudaEmitter(plan, sched)
    e.fast_offsets = False  # Metal's kf_off takes no kf_fast pair
    e.l2_keep = False  # no cache-policy loads in MSL
    decls, _ = _metal_params(plan)
    prog = row_program(plan, cache_rows=False)
    e.general = [s.index for s in plan.slots if s.kind == "tensor" and s.mode == "general"]
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
    def setup(d):
        before = len(e.lines)
        e.row_setup(d)
        for i in range(before, len(e.lines)):
            e.lines[i] = (e.lines[i].replace("const float* p", "device const float* p")
                          .replace("const bool* p", "device const bool* p")
                          .replace("float* q", "device float* q").replace("bool* q", "device bool* q"))

    if plan.npasses == 0:
        e.w(1, "const long r = (long)gid.y;")
        e.w(1, "const long c = (long)gid.x;")
        e.w(1, "if (r >= rows || c >= cols) return;")
        setup(1)
        e.row_nodes(1, prog.row_nodes_by_pass.get(0, []))
        for loop in prog.loops:
            e.body(1, loop)
        for j, o in enumerate(plan.outputs):
            if o.level == "R":
                e.w(1, f"if (c == 0) o{j}[r] = {e.var(o.node)};")
    elif not block:
        e.w(1, "const long r = (long)gid;")
        e.w(1, "if (r >= rows) return;")
        setup(1)
        e.row_nodes(1, prog.row_nodes_by_pass.get(0, []))
        for loop in prog.loops:
            if loop.kind == "pass":
                for r in loop.reds:
                    op = e.by[r].red["op"]
                    e.w(1, f"float acc_{r} = {IDENT[op]};")
            e.w(1, "for (long c = 0; c < cols; ++c) {")
            e.body(2, loop)
            e.w(1, "}")
            if loop.kind == "pass":
                for r in loop.reds:
                    div = " / (float)cols" if e.by[r].red["op"] == "mean" else ""
                    e.w(1, f"const float {e.var(r)} = acc_{r}{div};")
                e.row_nodes(1, prog.row_nodes_by_pass.get(loop.index, []))
        for j, o in enumerate(plan.outputs):
            if o.level == "R":
                e.w(1, f"o{j}[r] = {e.var(o.node)};")
    else:
        e.w(1, "threadgroup float kf_sh[1024];")
        e.w(1, "const long r = (long)tgid.y;")
        e.w(1, "const uint t = tid.x;")
        e.w(1, "const uint nt = tsize.x;")
        e.w(1, "if (r >= rows) return;")
        setup(1)
        e.row_nodes(1, prog.row_nodes_by_pass.get(0, []))
        for loop in prog.loops:
            if loop.kind == "pass":
                for r in loop.reds:
                    op = e.by[r].red["op"]
                    e.w(1, f"float acc_{r} = {IDENT[op]};")
            e.w(1, "for (long c = t; c < cols; c += nt) {")
            e.body(2, loop)
            e.w(1, "}")
            if loop.kind == "pass":
                for r in loop.reds:
                    op = e.by[r].red["op"]
                    comb = {"sum": "a + b", "mean": "a + b", "max": "(b > a ? b : a)", "min": "(b < a ? b : a)"}[op]
                    simd = {"sum": "simd_sum", "mean": "simd_sum", "max": "simd_max", "min": "simd_min"}[op]
                    ident = {"sum": "0.0f", "mean": "0.0f", "max": "-INFINITY", "min": "INFINITY"}[op]
                    if sched.warp_reduce:
                        e.w(1, f"acc_{r} = {simd}(acc_{r});")
                        e.w(1, f"if ((t & 31u) == 0u) kf_sh[t >> 5] = acc_{r};")
                        e.w(1, "threadgroup_barrier(mem_flags::mem_threadgroup);")
                        e.w(1, "if (t == 0u) {")
                        e.w(2, f"float a = {ident};")
                        e.w(2, "for (uint w = 0; w < (nt + 31u) / 32u; ++w) {")
                        e.w(3, f"const float b = kf_sh[w]; a = {comb};")
                        e.w(2, "}")
                        e.w(2, "kf_sh[0] = a;")
                        e.w(1, "}")
                    else:
                        e.w(1, f"kf_sh[t] = acc_{r};")
                        e.w(1, "threadgroup_barrier(mem_flags::mem_threadgroup);")
                        e.w(1, "for (uint s = nt >> 1; s > 0u; s >>= 1) {")
                        e.w(2, "if (t < s) {")
                        e.w(3, f"const float a = kf_sh[t]; const float b = kf_sh[t + s]; kf_sh[t] = {comb};")
                        e.w(2, "}")
                        e.w(2, "threadgroup_barrier(mem_flags::mem_threadgroup);")
                        e.w(1, "}")
                    e.w(1, "threadgroup_barrier(mem_flags::mem_threadgroup);")
                    div = " / (float)cols" if op == "mean" else ""
                    e.w(1, f"const float {e.var(r)} = kf_sh[0]{div};")
                    e.w(1, "threadgroup_barrier(mem_flags::mem_threadgroup);")
                e.row_nodes(1, prog.row_nodes_by_pass.get(loop.index, []))
        for j, o in enumerate(plan.outputs):
            if o.level == "R":
                e.w(1, f"if (t == 0u) o{j}[r] = {e.var(o.node)};")
    e.w(0, "}")
    text = "\n".join(e.lines) + "\n"
    return text.replace("long long", "long")


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
