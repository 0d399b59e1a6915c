"""GPU candidate writers: CUDA C++ through NVRTC (`platforms.cuda.compile_cuda`) and Triton (`@triton.jit`).

Same kernel plans as the CPU writer (row space, element- and row-level values, reduction passes); the schedule
knobs mean:
- CUDA: elementwise kernels run (row, chunk) tasks over a grid-stride loop of thread blocks. Row kernels start
  with one thread per row; `parallelize_rows` gives each row a thread block (block-wide reductions through shared
  memory); `warp_reduce` reduces with warp shuffles first; `vectorize` uses float4 loads/stores on rows whose
  pointers are 16-byte aligned and whose length is a multiple of 4; `block_shape` uses 1024-thread blocks and
  4096-element chunks; `unroll` adds `#pragma unroll 4`.
- Triton: elementwise kernels are one program per (row, block of columns); row kernels one program per row that
  loops over the row in blocks; `block_shape` uses 4x larger blocks and 8 warps; `unroll` pipelines the row loops
  (`num_stages`). Moves that do not change a Triton program are skipped by the generator.
"""

from __future__ import annotations

from . import emit
from .backends import Backend
from .codegen_cpu import signature as cpu_signature
from .exprs import flit, node_expr, row_program
from .fusion import KernelPlan
from .schedule import Schedule

# --------------------------------------------------------------------------------------------------------- CUDA

CUDA_PRELUDE = r"""
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
__device__ __forceinline__ float kf_exp(float x) { return expf(x); }
__device__ __forceinline__ float kf_log(float x) { return logf(x); }
__device__ __forceinline__ float kf_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float kf_erf(float x) { return erff(x); }
__device__ __forceinline__ float kf_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ float kf_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ float kf_fabs(float x) { return fabsf(x); }
__device__ __forceinline__ float kf_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float kf_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ float kf_sin(float x) { return sinf(x); }
__device__ __forceinline__ float kf_cos(float x) { return cosf(x); }
__device__ __forceinline__ float kf_tan(float x) { return tanf(x); }
__device__ __forceinline__ float kf_atan(float x) { return atanf(x); }
__device__ __forceinline__ float kf_sinh(float x) { return sinhf(x); }
__device__ __forceinline__ float kf_cosh(float x) { return coshf(x); }
__device__ __forceinline__ float kf_asin(float x) { return asinf(x); }
__device__ __forceinline__ float kf_acos(float x) { return acosf(x); }
__device__ __forceinline__ float kf_floor(float x) { return floorf(x); }
__device__ __forceinline__ float kf_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ float kf_rint(float x) { return rintf(x); }
__device__ __forceinline__ float kf_trunc(float x) { return truncf(x); }
__device__ __forceinline__ long long kf_off(long long r, const long long* shape, const long long* st, int nl) {
    long long off = 0;
    for (int d = nl - 1; d >= 0; --d) {
        const long long n = shape[d];
        off += (r % n) * st[d];
        r /= n;
    }
    return off;
}
__device__ __forceinline__ float kf_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float kf_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) { const float w = __shfl_xor_sync(0xffffffffu, v, o); v = w > v ? w : v; }
    return v;
}
__device__ __forceinline__ float kf_warp_min(float v) {
    for (int o = 16; o > 0; o >>= 1) { const float w = __shfl_xor_sync(0xffffffffu, v, o); v = w < v ? w : v; }
    return v;
}
// block-wide reductions (blockDim.x a power of two, at most 1024); every thread gets the result
__device__ float kf_block_reduce(float v, int op, float* sh, bool warp) {
    const int t = threadIdx.x;
    if (warp) {
        v = op == 0 ? kf_warp_sum(v) : (op == 1 ? kf_warp_max(v) : kf_warp_min(v));
        if ((t & 31) == 0) sh[t >> 5] = v;
        __syncthreads();
        const int nw = (blockDim.x + 31) >> 5;
        const float ident = op == 0 ? 0.0f : (op == 1 ? -INFINITY : INFINITY);
        v = t < nw ? sh[t] : ident;
        if (t < 32) v = op == 0 ? kf_warp_sum(v) : (op == 1 ? kf_warp_max(v) : kf_warp_min(v));
        if (t == 0) sh[0] = v;
        __syncthreads();
    } else {
        sh[t] = v;
        __syncthreads();
        for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
            if (t < s) {
                const float a = sh[t], b = sh[t + s];
                sh[t] = op == 0 ? a + b : (op == 1 ? (b > a ? b : a) : (b < a ? b : a));
            }
            __syncthreads();
        }
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}
"""

_OPS = {"sum": 0, "mean": 0, "max": 1, "min": 2}
_IDENT = {"sum": "0.0f", "mean": "0.0f", "max": "-INFINITY", "min": "INFINITY"}


def cuda_threads(plan: KernelPlan, sched: Schedule) -> int:
    return 1024 if sched.block else 256


def cuda_chunk(sched: Schedule) -> int:
    return 4096 if sched.block else 1024


def _cuda_signature(plan: KernelPlan) -> list[tuple[str, str]]:
    out = []
    for decl, role in cpu_signature(plan, Schedule()):
        out.append((decl.replace("int64_t", "long long"), role))
    return out


class _CudaEmitter:
    def __init__(self, plan: KernelPlan, sched: Schedule):
        self.plan, self.sched = plan, sched
        self.by = {n.name: n for n in plan.nodes}
        self.lines: list[str] = []
        self.general = [s.index for s in plan.slots if s.kind == "tensor" and s.mode == "general"]

    def w(self, depth, text):
        self.lines.append("    " * depth + text)

    @staticmethod
    def var(name):
        return "v_" + name.replace(".", "_")

    def operand(self, o):
        if o[0] == "slot":
            s = self.plan.slots[o[1]]
            return f"s{s.index}" if s.kind == "scalar" else (f"x{s.index}" if s.inner == 1 else f"r{s.index}")
        if o[0] == "node":
            return self.var(o[1])
        if o[0] == "c":
            return flit(o[1])
        return "(float)cols" if not o[1] else f"((float)cols - {flit(o[1])})"

    def row_setup(self, d):
        plan = self.plan
        for s in plan.slots:
            if s.kind != "tensor":
                continue
            if s.mode == "rowmajor":
                off = "r * cols" if s.inner == 1 else "r"
            elif s.mode == "zero":
                off = "0"
            else:
                gi = self.general.index(s.index)
                off = f"kf_off(r, meta, meta + {plan.nl} + {gi * plan.nl}, {plan.nl})"
            self.w(d, f"const {s.ctype}* p{s.index} = a{s.index} + {off};")
            if s.inner == 0:
                self.w(d, f"const {s.ctype} r{s.index} = p{s.index}[0];")
        for j, o in enumerate(plan.outputs):
            if o.level == "E":
                self.w(d, f"{o.dtype}* q{j} = o{j} + r * cols;")

    def row_nodes(self, d, names):
        for name in names:
            n = self.by[name]
            self.w(d, f"const {n.dtype} {self.var(name)} = {node_expr(n, self.operand)};")

    def body(self, d, loop, acc_update: bool = True):
        for si in loop.slots:
            s = self.plan.slots[si]
            self.w(d, f"const {s.ctype} x{si} = p{si}[c];")
        for name in loop.compute:
            n = self.by[name]
            self.w(d, f"const {n.dtype} {self.var(name)} = {node_expr(n, self.operand)};")
        for r in loop.reds:
            n = self.by[r]
            src = self.operand(n.operands[0])
            op = n.red["op"]
            if op in ("sum", "mean"):
                self.w(d, f"acc_{r} += {src};")
            elif op == "max":
                self.w(d, f"acc_{r} = {src} > acc_{r} ? {src} : acc_{r};")
            else:
                self.w(d, f"acc_{r} = {src} < acc_{r} ? {src} : acc_{r};")
        for j in loop.outputs:
            self.w(d, f"q{j}[c] = {self.var(self.plan.outputs[j].node)};")

    def vec4_ok(self, loop) -> str:
        """Condition under which a loop may use float4 accesses: every row pointer it touches is 16-byte aligned."""
        ptrs = [f"p{si}" for si in loop.slots if self.plan.slots[si].ctype == "float"]
        ptrs += [f"q{j}" for j in loop.outputs if self.plan.outputs[j].dtype == "float"]
        if any(self.plan.slots[si].ctype != "float" for si in loop.slots) or any(
                self.plan.outputs[j].dtype != "float" for j in loop.outputs) or not ptrs:
            return ""
        conds = ["(cols & 3) == 0"] + [f"(((unsigned long long){p}) & 15) == 0" for p in ptrs]
        return " && ".join(conds)


def cuda_kernel(plan: KernelPlan, sched: Schedule) -> str:
    e = _CudaEmitter(plan, sched)
    params = ", ".join(d for d, _ in _cuda_signature(plan))
    prog = row_program(plan, cache_rows=False)
    unroll = "#pragma unroll 4" if sched.unroll else None
    e.w(0, f"// {plan.label}")
    e.w(0, f'extern "C" __global__ void {plan.name}({params}) {{')
    if plan.npasses == 0:
        e.w(1, f"const long long CH = {cuda_chunk(sched)};")
        e.w(1, "const long long nch = (cols + CH - 1) / CH;")
        e.w(1, "const long long ntask = rows * nch;")
        e.w(1, "for (long long t = blockIdx.x; t < ntask; t += gridDim.x) {")
        e.w(2, "const long long r = t / nch;")
        e.w(2, "const long long c0 = (t - r * nch) * CH;")
        e.w(2, "const long long c1 = min(cols, c0 + CH);")
        e.row_setup(2)
        e.row_nodes(2, prog.row_nodes_by_pass.get(0, []))
        for loop in prog.loops:
            _cuda_loop(e, 2, loop, "c0", "c1", unroll)
        if any(o.level == "R" for o in plan.outputs):
            e.w(2, "if (c0 == 0 && threadIdx.x == 0) {")
            for j, o in enumerate(plan.outputs):
                if o.level == "R":
                    e.w(3, f"o{j}[r] = {e.var(o.node)};")
            e.w(2, "}")
        e.w(1, "}")
    elif not (sched.parallel or sched.warp_reduce):
        # one thread per row
        e.w(1, "const long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x;")
        e.w(1, "if (r >= rows) return;")
        e.row_setup(1)
        e.row_nodes(1, prog.row_nodes_by_pass.get(0, []))
        for loop in prog.loops:
            if loop.kind == "pass":
                for r in loop.reds:
                    op = e.by[r].red["op"]
                    e.w(1, f"float acc_{r} = {_IDENT[op]};")
            if unroll:
                e.w(1, unroll)
            e.w(1, "for (long long c = 0; c < cols; ++c) {")
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
        # one thread block per row
        e.w(1, "__shared__ float kf_sh[1024];")
        e.w(1, "for (long long r = blockIdx.x; r < rows; r += gridDim.x) {")
        e.row_setup(2)
        e.row_nodes(2, prog.row_nodes_by_pass.get(0, []))
        warp = "true" if sched.warp_reduce else "false"
        for loop in prog.loops:
            if loop.kind == "pass":
                for r in loop.reds:
                    op = e.by[r].red["op"]
                    e.w(2, f"float acc_{r} = {_IDENT[op]};")
                _cuda_loop(e, 2, loop, "0", "cols", unroll, vector=False)
                for r in loop.reds:
                    op = e.by[r].red["op"]
                    div = " / (float)cols" if op == "mean" else ""
                    e.w(2, f"const float {e.var(r)} = kf_block_reduce(acc_{r}, {_OPS[op]}, kf_sh, {warp}){div};")
                e.row_nodes(2, prog.row_nodes_by_pass.get(loop.index, []))
            else:
                _cuda_loop(e, 2, loop, "0", "cols", unroll)
        if any(o.level == "R" for o in plan.outputs):
            e.w(2, "if (threadIdx.x == 0) {")
            for j, o in enumerate(plan.outputs):
                if o.level == "R":
                    e.w(3, f"o{j}[r] = {e.var(o.node)};")
            e.w(2, "}")
        e.w(1, "}")
    e.w(0, "}")
    return "\n".join(e.lines) + "\n"


def _cuda_loop(e: _CudaEmitter, d: int, loop, lo: str, hi: str, unroll: str | None, vector: bool = True) -> None:
    """A block-stride loop over [lo, hi); with `vectorize`, a float4 path when the row's pointers allow it."""
    cond = e.vec4_ok(loop) if (vector and e.sched.vectorize and loop.kind == "final") else ""
    if cond:
        e.w(d, f"if ({cond}) {{")
        e.w(d + 1, f"for (long long c4 = {lo} / 4 + threadIdx.x; c4 < {hi} / 4; c4 += blockDim.x) {{")
        for si in loop.slots:
            e.w(d + 2, f"const float4 X{si} = reinterpret_cast<const float4*>(p{si})[c4];")
        for j in loop.outputs:
            e.w(d + 2, f"float4 Y{j};")
        for lane in "xyzw":
            e.w(d + 2, "{")
            for si in loop.slots:
                e.w(d + 3, f"const float x{si} = X{si}.{lane};")
            for name in loop.compute:
                n = e.by[name]
                e.w(d + 3, f"const {n.dtype} {e.var(name)} = {node_expr(n, e.operand)};")
            for j in loop.outputs:
                e.w(d + 3, f"Y{j}.{lane} = {e.var(e.plan.outputs[j].node)};")
            e.w(d + 2, "}")
        for j in loop.outputs:
            e.w(d + 2, f"reinterpret_cast<float4*>(q{j})[c4] = Y{j};")
        e.w(d + 1, "}")
        e.w(d, "} else {")
        d += 1
    if unroll:
        e.w(d, unroll)
    e.w(d, f"for (long long c = {lo} + threadIdx.x; c < {hi}; c += blockDim.x) {{")
    e.body(d + 1, loop)
    e.w(d, "}")
    if cond:
        e.w(d - 1, "}")


def cuda_launch_lines(plan: KernelPlan, names: dict, sched: Schedule) -> list[str]:
    lines, args = emit.prep_lines(plan, names)
    call = []
    for _, role in _cuda_signature(plan):
        kind, _, idx = role.partition(":")
        call.append(args[kind] if not idx else args[f"{kind}:{idx}"])
    threads = cuda_threads(plan, sched)
    if plan.npasses == 0:
        lines.append(f"tasks = rows * ((cols + {cuda_chunk(sched) - 1}) // {cuda_chunk(sched)})")
        lines.append("grid = max(1, min(tasks, self.kf_sms * 16))")
    elif sched.parallel or sched.warp_reduce:
        lines.append("grid = max(1, min(rows, self.kf_sms * 32))")
    else:
        lines.append(f"grid = max(1, (rows + {threads - 1}) // {threads})")
    lines.append(f"self.kf_mod.{plan.name}(grid=(grid,), block=({threads},), args=({', '.join(call)},))")
    return lines


class CudaBackend(Backend):
    kind = "cuda-nvrtc"
    device_type = "cuda"

    def program(self, plan, desc, sched, target, header, marker):
        src = "\n".join([CUDA_PRELUDE.strip()] + [cuda_kernel(k, sched) for k in plan.kernels])
        tail = ["self.kf_mod = compile_cuda(SOURCE)",
                "self.kf_sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count"]
        return emit.candidate(plan, desc, header=header, marker=marker,
                              imports=[f"from {target.module} import compile_cuda"], source_name="SOURCE",
                              source_text=src, init_tail=tail,
                              launch=lambda kp, names: cuda_launch_lines(kp, names, sched))


# ------------------------------------------------------------------------------------------------------- Triton

TRITON_TEMPLATES = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})", "neg": "(-{0})",
    "abs": "tl.abs({0})", "exp": "tl.exp({0})", "exp2": "tl.exp2({0})", "log": "tl.log({0})",
    "log2": "tl.log2({0})", "log10": "(tl.log({0}) * 0.4342944819032518)", "log1p": "tl.log(1.0 + {0})",
    "expm1": "(tl.exp({0}) - 1.0)", "sqrt": "tl.sqrt({0})", "rsqrt": "tl.rsqrt({0})", "reciprocal": "(1.0 / {0})",
    "square": "({0} * {0})", "erf": "tl.erf({0})", "erfc": "(1.0 - tl.erf({0}))", "sin": "tl.sin({0})",
    "cos": "tl.cos({0})", "floor": "tl.floor({0})", "ceil": "tl.ceil({0})", "sigmoid": "tl.sigmoid({0})",
    "tanh": "(2.0 * tl.sigmoid(2.0 * {0}) - 1.0)", "relu": "tl.where({0} < 0.0, 0.0, {0})",
    "relu6": "tl.where({0} < 0.0, 0.0, tl.where({0} > 6.0, 6.0, {0}))", "silu": "({0} * tl.sigmoid({0}))",
    "gelu": "(0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476)))",
    "gelu_tanh": "(0.5 * {0} * (2.0 * tl.sigmoid(1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0}))))",
    "mish": "({0} * (2.0 * tl.sigmoid(2.0 * tl.where({0} > 20.0, {0}, tl.log(1.0 + tl.exp({0})))) - 1.0))",
    "hardsigmoid": "tl.where({0} <= -3.0, 0.0, tl.where({0} >= 3.0, 1.0, {0} / 6.0 + 0.5))",
    "hardswish": "tl.where({0} <= -3.0, 0.0, tl.where({0} >= 3.0, {0}, {0} * ({0} + 3.0) / 6.0))",
    "selu": "(1.0507009873554805 * tl.where({0} > 0.0, {0}, 1.6732632423543772 * (tl.exp({0}) - 1.0)))",
    "softsign": "({0} / (1.0 + tl.abs({0})))",
    "leaky_relu": "tl.where({0} > 0.0, {0}, {0} * {slope})",
    "elu": "tl.where({0} > 0.0, {0}, {alpha} * (tl.exp({0}) - 1.0))",
    "celu": "tl.where({0} > 0.0, {0}, {alpha} * (tl.exp({0} / {alpha}) - 1.0))",
    "softplus": "tl.where({0} * {beta} > {threshold}, {0}, tl.log(1.0 + tl.exp({0} * {beta})) / {beta})",
    "threshold": "tl.where({0} > {threshold}, {0}, {value})",
    "clamp_min": "tl.where({0} < {1}, {1}, {0})", "clamp_max": "tl.where({0} > {1}, {1}, {0})",
    "maximum": "tl.where(({0} > {1}) | ({0} != {0}), {0}, {1})",
    "minimum": "tl.where(({0} < {1}) | ({0} != {0}), {0}, {1})",
    "gt": "({0} > {1})", "lt": "({0} < {1})", "ge": "({0} >= {1})", "le": "({0} <= {1})", "eq": "({0} == {1})",
    "ne": "({0} != {1})", "logical_and": "(({0} != 0) & ({1} != 0))", "logical_or": "(({0} != 0) | ({1} != 0))",
    "logical_not": "({0} == 0)", "where": "tl.where({0}, {1}, {2})", "lerp": "({0} + {2} * ({1} - {0}))",
}


class TritonUnsupported(Exception):
    pass


def _plit(v) -> str:
    if isinstance(v, bool):
        return "1.0" if v else "0.0"
    s = flit(v)
    if s in ("INFINITY", "(-INFINITY)", "NAN"):
        return {"INFINITY": "float('inf')", "(-INFINITY)": "float('-inf')", "NAN": "float('nan')"}[s]
    if s.startswith("0x") or s.startswith("-0x"):
        return repr(float.fromhex(s[:-1]))
    return s[:-1]


def triton_expr(n, operand) -> str:
    if n.fn == "pow":
        base, ex = n.operands
        a = operand(base)
        if ex[0] == "c" and not isinstance(ex[1], bool):
            e = float(ex[1])
            special = {2.0: f"({a} * {a})", 3.0: f"({a} * {a} * {a})", 1.0: f"({a})", 0.0: "1.0",
                       0.5: f"tl.sqrt({a})", -0.5: f"tl.rsqrt({a})", -1.0: f"(1.0 / {a})",
                       -2.0: f"(1.0 / ({a} * {a}))"}
            if e in special:
                return special[e]
        raise TritonUnsupported("pow with a general exponent")
    if n.fn not in TRITON_TEMPLATES:
        raise TritonUnsupported(f"{n.fn} has no Triton template")
    attrs = {k: _plit(v) for k, v in n.attrs.items() if isinstance(v, (int, float))}
    return TRITON_TEMPLATES[n.fn].format(*[operand(o) for o in n.operands], **attrs)


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
            return _plit(o[1])
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


def triton_launch_lines(plan: KernelPlan, names: dict, sched: Schedule) -> list[str]:
    lines, args = emit.prep_lines(plan, names)
    call = []
    for _, role in cpu_signature(plan, Schedule()):
        kind, _, idx = role.partition(":")
        call.append(args[kind] if not idx else args[f"{kind}:{idx}"])
    scale = 4 if sched.block else 1
    warps = 8 if sched.block else 4
    if plan.npasses == 0:
        block = 1024 * scale
        lines.append(f"grid = (max(1, rows * triton.cdiv(cols, {block})),)")
    else:
        block = 256 * scale
        lines.append("grid = (max(1, rows),)")
    lines.append(f"{plan.name}[grid]({', '.join(call)}, BLOCK={block}, num_warps={warps})")
    return lines


class TritonBackend(Backend):
    kind = "triton"
    device_type = "cuda"

    def program(self, plan, desc, sched, target, header, marker):
        try:
            kernels = [triton_kernel(k, sched) for k in plan.kernels]
        except TritonUnsupported as e:
            raise ValueError(f"the Triton writer cannot express this graph: {e}") from None
        return emit.candidate(plan, desc, header=header, marker=marker,
                              imports=["import triton", "import triton.language as tl"], source_name=None,
                              source_text="\n\n".join(kernels), init_tail=[],
                              launch=lambda kp, names: triton_launch_lines(kp, names, sched))


# -------------------------------------------------------------------------------------------------------- Metal
# Written against platforms/metal.py's documented `compile_metal` API; not yet run on Apple hardware here. The
# Metal sources are checked by that platform's pure-Python signature parser in the tests.

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
    e = _CudaEmitter(plan, sched)
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
                    e.w(1, f"float acc_{r} = {_IDENT[op]};")
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
                    e.w(1, f"float acc_{r} = {_IDENT[op]};")
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


def metal_launch_lines(plan: KernelPlan, names: dict, sched: Schedule) -> list[str]:
    lines, args = emit.prep_lines(plan, names)
    _, roles = _metal_params(plan)
    call = []
    for role in roles:
        kind, _, idx = role.partition(":")
        call.append(args[kind] if not idx else args[f"{kind}:{idx}"])
    if plan.npasses == 0:
        lines.append("gx = max(1, min(cols, 256))")
        lines.append(f"self.kf_lib.{plan.name}({', '.join(call)}, threads=(max(1, cols), max(1, rows)), "
                     f"group_size=(gx, max(1, 256 // gx)))")
    elif sched.parallel or sched.warp_reduce:
        t = metal_threads(plan, sched)
        lines.append(f"self.kf_lib.{plan.name}({', '.join(call)}, threads=({t}, max(1, rows)), "
                     f"group_size=({t}, 1))")
    else:
        lines.append(f"self.kf_lib.{plan.name}({', '.join(call)}, threads=(max(1, rows),), "
                     f"group_size=(max(1, min(rows, 256)),))")
    return lines


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
