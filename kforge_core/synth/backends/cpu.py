"""C++ (OpenMP) kernels for the CPU target, in the `ctypes` candidate format (`platforms.cpu.compile_cpp`).

Schedule knobs and what they change in the emitted code:
- `parallel`: `#pragma omp parallel for` over rows (row kernels) or (row, chunk) tasks (elementwise kernels);
- `vectorize`: `#pragma omp simd` on inner loops with `reduction(...)` clauses, `__restrict__` pointers, and
  inline polynomial exp/log/tanh/erf that the compiler can vectorize (libm calls otherwise);
- `block`: elementwise kernels work in 4096-element chunks; row kernels keep expensive intermediates (exp, erf, ...)
  in a per-thread row cache instead of recomputing them in the write pass, and schedule rows dynamically;
- `unroll`: `-funroll-loops`, and `#pragma GCC unroll 4` on scalar inner loops or `simdlen(16)` (two vectors
  per iteration, independent accumulators) on vectorized ones.
"""

from __future__ import annotations

from .cexprs import RowProgram, cat_lines, flit, half_math, load, node_expr, row_program, store, value_ctype
from ..plan.plans import KernelPlan
from ..schedule import Schedule

SCALAR_MATH = r"""
static inline float kf_exp(float x) { return std::exp(x); }
static inline float kf_log(float x) { return std::log(x); }
static inline float kf_tanh(float x) { return std::tanh(x); }
static inline float kf_erf(float x) { return std::erf(x); }
static inline float kf_log1p(float x) { return std::log1p(x); }
static inline float kf_expm1(float x) { return std::expm1(x); }
"""

# Cephes-style single-precision approximations (about 1-2 ulp for exp/log, |err| < 2e-7 for erf): straight-line
# code with selects instead of branches, so `#pragma omp simd` loops vectorize them.
VECTOR_MATH = r"""
static inline float kf_bits_to_float(int32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
static inline int32_t kf_float_to_bits(float f) { int32_t b; std::memcpy(&b, &f, 4); return b; }
static inline float kf_exp(float x) {
    const float xc = x < -103.97208f ? -103.97208f : (x > 88.7228391f ? 88.7228391f : x);
    const float fx = std::floor(xc * 1.44269504088896341f + 0.5f);
    float r = xc - fx * 0.693359375f;
    r = r - fx * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    // 2^n as two normal powers of two, so results near FLT_MAX and in the denormal range stay right
    const int32_t n = (int32_t)fx;
    const int32_t n1 = n >> 1;
    const float res = y * kf_bits_to_float((n1 + 127) << 23) * kf_bits_to_float((n - n1 + 127) << 23);
    return x > 88.7228391f ? INFINITY : (x < -103.97208f ? 0.0f : res);
}
static inline float kf_log(float x) {
    int32_t bits = kf_float_to_bits(x);
    float e = (float)(((bits >> 23) & 0xff) - 126);
    float m = kf_bits_to_float((bits & 0x807fffff) | 0x3f000000);
    const bool small = m < 0.707106781186547524f;
    e = small ? e - 1.0f : e;
    m = small ? m + m - 1.0f : m - 1.0f;
    const float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    y += e * -2.12194440e-4f;
    y += -0.5f * z;
    float res = m + y;
    res += e * 0.693359375f;
    return x > 0.0f ? (x < INFINITY ? res : x) : (x == 0.0f ? -INFINITY : NAN);
}
static inline float kf_tanh(float x) {
    const float ax = std::fabs(x);
    const float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    const float small = p * z * x + x;
    const float big = 1.0f - 2.0f / (kf_exp(2.0f * ax) + 1.0f);
    return ax < 0.625f ? small : (x < 0.0f ? -big : big);
}
static inline float kf_erf(float x) {
    const float ax = std::fabs(x);
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    const float r = 1.0f - p * t * kf_exp(-ax * ax);
    // small |x|: Taylor series keeps the relative accuracy the rational form loses near 0
    const float z = x * x;
    const float taylor = x * (1.12837916709551257f + z * (-0.376126389031837524f + z * (0.112837916709551257f
                         + z * -0.0268661706451312522f)));
    return ax < 0.25f ? taylor : (x < 0.0f ? -r : r);
}
static inline float kf_log1p(float x) { return std::fabs(x) < 1e-4f ? x * (1.0f - 0.5f * x) : kf_log(1.0f + x); }
static inline float kf_expm1(float x) { return std::fabs(x) < 1e-5f ? x + 0.5f * x * x : kf_exp(x) - 1.0f; }
"""

COMMON_MATH = r"""
static inline float kf_fabs(float x) { return std::fabs(x); }
static inline float kf_sqrt(float x) { return std::sqrt(x); }
static inline float kf_pow(float a, float b) { return std::pow(a, b); }
static inline float kf_sin(float x) { return std::sin(x); }
static inline float kf_cos(float x) { return std::cos(x); }
static inline float kf_tan(float x) { return std::tan(x); }
static inline float kf_atan(float x) { return std::atan(x); }
static inline float kf_sinh(float x) { return std::sinh(x); }
static inline float kf_cosh(float x) { return std::cosh(x); }
static inline float kf_asin(float x) { return std::asin(x); }
static inline float kf_acos(float x) { return std::acos(x); }
static inline float kf_floor(float x) { return std::floor(x); }
static inline float kf_ceil(float x) { return std::ceil(x); }
static inline float kf_rint(float x) { return std::nearbyint(x); }
static inline float kf_trunc(float x) { return std::trunc(x); }
static inline int64_t kf_off(int64_t r, const int64_t* shape, const int64_t* st, int nl) {
    int64_t off = 0;
    for (int d = nl - 1; d >= 0; --d) {
        const int64_t n = shape[d];
        off += (r % n) * st[d];
        r /= n;
    }
    return off;
}
"""

HALF_BITS = r"""
static inline unsigned int kf_as_uint(float f) { unsigned int b; std::memcpy(&b, &f, 4); return b; }
static inline float kf_as_float(unsigned int b) { float f; std::memcpy(&f, &b, 4); return f; }
"""

_PARAM = {"kf_bf16": "uint16_t", "kf_f16": "uint16_t"}  # half storage as the callers' signature parsers name it

PW_CHUNK = 65536
PW_BLOCK_CHUNK = 4096


def cflags(sched: Schedule) -> tuple[str, ...]:
    flags = ["-fno-math-errno", "-fno-trapping-math"]
    if sched.unroll:
        flags.append("-funroll-loops")
    return tuple(flags)


def source(plans: list[KernelPlan], sched: Schedule) -> str:
    parts = ["#include <cmath>", "#include <cstdint>", "#include <cstring>", "#include <algorithm>",
             "#include <vector>", VECTOR_MATH if sched.vectorize else SCALAR_MATH, COMMON_MATH]
    parts += half_math(plans, "static inline", HALF_BITS)
    for plan in plans:
        parts.append(kernel(plan, sched))
    return "\n".join(parts).strip() + "\n"


def signature(plan: KernelPlan, sched: Schedule) -> list[tuple[str, str]]:
    """[(C declaration, role)] in call order; role: 'slot:i', 'out:j', 'meta', 'rows', 'cols', 'scalar:i'."""
    restrict = " __restrict__" if sched.vectorize else ""
    inplace = {o.inplace_slot for o in plan.outputs if o.inplace_slot is not None}
    params = []
    for s in plan.slots:
        if s.kind == "tensor":
            r = "" if s.index in inplace else restrict
            params.append((f"const {_PARAM.get(s.ctype, s.ctype)}*{r} a{s.index}", f"slot:{s.index}"))
    for j, o in enumerate(plan.outputs):
        r = "" if o.inplace_slot is not None else restrict
        params.append((f"{_PARAM.get(o.dtype, o.dtype)}*{r} o{j}", f"out:{j}"))
    if any(s.kind == "tensor" and s.mode == "general" for s in plan.slots):
        params.append(("const int64_t* meta", "meta"))
    params.append(("int64_t rows", "rows"))
    params.append(("int64_t cols", "cols"))
    for s in plan.slots:
        if s.kind == "scalar":
            params.append((f"float s{s.index}", f"scalar:{s.index}"))
    return params


class CEmitter:
    """The C-like statement writer: per-row pointers and values, row-level nodes. The CUDA writer (and through it
    the Metal one) extends it."""

    def __init__(self, plan: KernelPlan, sched: Schedule):
        self.plan = plan
        self.sched = sched
        self.by = {n.name: n for n in plan.nodes}
        self.lines: list[str] = []
        self.general = [s.index for s in plan.slots if s.kind == "tensor" and s.mode == "general"]

    def w(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    @staticmethod
    def var(name: str) -> str:
        return "v_" + name.replace(".", "_")

    def operand(self, o, in_loop: bool = False) -> str:
        if o[0] == "slot":
            s = self.plan.slots[o[1]]
            if s.kind == "scalar":
                return f"s{s.index}"
            if s.inner == 1:
                return f"x{s.index}"
            return f"r{s.index}"
        if o[0] == "node":
            return self.var(o[1])
        if o[0] == "c":
            return flit(o[1])
        if o[0] == "cols":
            return "(float)cols" if not o[1] else f"((float)cols - {flit(o[1])})"
        raise ValueError(o)

    def offset(self, s) -> str:
        """Where row r of tensor slot s starts in its operand."""
        if s.mode == "rowmajor":
            return "r * cols" if s.inner == 1 else "r"
        if s.mode == "zero":
            return "0"
        nl = self.plan.nl
        return f"kf_off(r, meta, meta + {nl} + {self.general.index(s.index) * nl}, {nl})"

    def row_setup(self, depth: int) -> None:
        for s in self.plan.slots:
            if s.kind != "tensor":
                continue
            self.w(depth, f"const {s.ctype}* p{s.index} = a{s.index} + {self.offset(s)};")
            if s.inner == 0:
                self.w(depth, f"const {value_ctype(s.ctype)} r{s.index} = {load(s.ctype, f'p{s.index}[0]')};")

    def row_nodes(self, depth: int, names: list[str]) -> None:
        for name in names:
            n = self.by[name]
            self.w(depth, f"const {n.dtype} {self.var(name)} = {node_expr(n, lambda o: self.operand(o, False))};")

    def loop_pragma(self, depth: int, reductions: list[str]) -> None:
        if self.sched.unroll and not self.sched.vectorize:
            self.w(depth, "#pragma GCC unroll 4")
        if self.sched.vectorize:
            clause = ""
            by_op: dict[str, list[str]] = {}
            for r in reductions:
                op = self.by[r].red["op"]
                by_op.setdefault({"sum": "+", "mean": "+", "max": "max", "min": "min"}[op], []).append(f"acc_{r}")
            for op, accs in by_op.items():
                clause += f" reduction({op}:{', '.join(accs)})"
            # unrolled: two vectors per iteration (independent accumulators for reductions)
            simdlen = " simdlen(16)" if self.sched.unroll else ""
            self.w(depth, f"#pragma omp simd{simdlen}{clause}")

    def loop_body(self, depth: int, loop, cache_index: dict) -> None:
        for si in loop.slots:
            s = self.plan.slots[si]
            self.w(depth, f"const {value_ctype(s.ctype)} x{si} = {load(s.ctype, f'p{si}[c]')};")
        for name in loop.load:
            self.w(depth, f"const float {self.var(name)} = sc{cache_index[name]}[c];")
        for name in loop.compute:
            n = self.by[name]
            if n.fn == "cat":
                for dd, text in cat_lines(n, self.plan, self.var, lambda o: self.operand(o, True)):
                    self.w(depth + dd, text)
                continue
            self.w(depth, f"const {n.dtype} {self.var(name)} = {node_expr(n, lambda o: self.operand(o, True))};")
        for name in loop.store_cache:
            self.w(depth, f"sc{cache_index[name]}[c] = {self.var(name)};")
        for r in loop.reds:
            n = self.by[r]
            src = self.operand(n.operands[0], True)
            if n.red["op"] in ("sum", "mean"):
                self.w(depth, f"acc_{r} += (double){src};")
            elif n.red["op"] == "max":
                self.w(depth, f"acc_{r} = {src} > acc_{r} ? {src} : acc_{r};")
            else:
                self.w(depth, f"acc_{r} = {src} < acc_{r} ? {src} : acc_{r};")
        for j in loop.outputs:
            out = self.plan.outputs[j]
            self.w(depth, f"q{j}[c] = {store(out.dtype, self.var(out.node))};")


def kernel(plan: KernelPlan, sched: Schedule) -> str:
    e = CEmitter(plan, sched)
    params = ", ".join(decl for decl, _ in signature(plan, sched))
    kind = f"row kernel, {plan.npasses} reduction pass(es)" if plan.npasses else "elementwise"
    e.w(0, f"// {plan.label}: {kind}")
    e.w(0, f'extern "C" void {plan.name}({params}) {{')
    prog = row_program(plan, cache_rows=sched.block and plan.npasses > 0)
    if plan.npasses == 0:
        _pointwise_body(e, plan, sched, prog)
    else:
        _row_body(e, plan, sched, prog)
    e.w(0, "}")
    return "\n".join(e.lines) + "\n"


def _store_row_outputs(e: CEmitter, depth: int, plan: KernelPlan, available: set) -> None:
    for j, out in enumerate(plan.outputs):
        if out.level == "R" and out.node in available:
            e.w(depth, f"o{j}[r] = {store(out.dtype, e.var(out.node))};")


def _pointwise_body(e: CEmitter, plan: KernelPlan, sched: Schedule, prog: RowProgram) -> None:
    chunk = PW_BLOCK_CHUNK if sched.block else PW_CHUNK
    e.w(1, f"const int64_t CH = {chunk};")
    e.w(1, "const int64_t nch = cols > 0 ? (cols + CH - 1) / CH : 0;")
    e.w(1, "const int64_t ntask = rows * nch;")
    if sched.parallel:
        e.w(1, "#pragma omp parallel for schedule(static)")
    e.w(1, "for (int64_t t = 0; t < ntask; ++t) {")
    e.w(2, "const int64_t r = t / nch;")
    e.w(2, "const int64_t c0 = (t - r * nch) * CH;")
    e.w(2, "const int64_t c1 = std::min(cols, c0 + CH);")
    e.row_setup(2)
    e.row_nodes(2, prog.row_nodes_by_pass.get(0, []))
    for j, out in enumerate(plan.outputs):
        if out.level == "E":
            e.w(2, f"{out.dtype}* q{j} = o{j} + r * cols;")
    for loop in prog.loops:
        e.loop_pragma(2, [])
        e.w(2, "for (int64_t c = c0; c < c1; ++c) {")
        e.loop_body(3, loop, {})
        e.w(2, "}")
    row_outs = [j for j, o in enumerate(plan.outputs) if o.level == "R"]
    if row_outs:
        e.w(2, "if (c0 == 0) {")
        _store_row_outputs(e, 3, plan, set(prog.row_nodes_by_pass.get(0, [])) | {
            o.node for o in plan.outputs if o.level == "R"})
        e.w(2, "}")
    e.w(1, "}")
    if any(o.level == "R" for o in plan.outputs):
        # rows with no columns still get their row values
        e.w(1, "if (cols == 0) {")
        e.w(2, "for (int64_t r = 0; r < rows; ++r) {")
        e.row_setup(3)
        e.row_nodes(3, prog.row_nodes_by_pass.get(0, []))
        _store_row_outputs(e, 3, plan, {o.node for o in plan.outputs})
        e.w(2, "}")
        e.w(1, "}")


def _row_body(e: CEmitter, plan: KernelPlan, sched: Schedule, prog: RowProgram) -> None:
    ncache = len(prog.cached)
    cache_index = {name: i for i, name in enumerate(prog.cached)}
    depth = 1
    if ncache:
        if sched.parallel:
            e.w(1, "#pragma omp parallel")
            e.w(1, "{")
            depth = 2
        e.w(depth, f"std::vector<float> kf_cache((size_t){ncache} * (size_t)(cols > 0 ? cols : 1));")
        if sched.parallel:
            e.w(depth, "#pragma omp for schedule(dynamic, 4)")
    elif sched.parallel:
        e.w(1, "#pragma omp parallel for schedule(dynamic, 4)" if sched.block else
            "#pragma omp parallel for schedule(static)")
    e.w(depth, "for (int64_t r = 0; r < rows; ++r) {")
    d = depth + 1
    e.row_setup(d)
    for i in range(ncache):
        e.w(d, f"float* sc{i} = kf_cache.data() + (size_t){i} * (size_t)cols;")
    for j, out in enumerate(plan.outputs):
        if out.level == "E":
            e.w(d, f"{out.dtype}* q{j} = o{j} + r * cols;")
    e.row_nodes(d, prog.row_nodes_by_pass.get(0, []))
    for loop in prog.loops:
        if loop.kind == "pass":
            for r in loop.reds:
                op = e.by[r].red["op"]
                init = {"sum": "double", "mean": "double"}.get(op, "float")
                val = {"sum": "0.0", "mean": "0.0", "max": "-INFINITY", "min": "INFINITY"}[op]
                e.w(d, f"{init} acc_{r} = {val};")
        e.loop_pragma(d, loop.reds)
        e.w(d, "for (int64_t c = 0; c < cols; ++c) {")
        e.loop_body(d + 1, loop, cache_index)
        e.w(d, "}")
        if loop.kind == "pass":
            for r in loop.reds:
                op = e.by[r].red["op"]
                if op == "mean":
                    e.w(d, f"const float {e.var(r)} = (float)(acc_{r} / (double)cols);")
                else:
                    e.w(d, f"const float {e.var(r)} = (float)acc_{r};")
            e.row_nodes(d, prog.row_nodes_by_pass.get(loop.index, []))
    _store_row_outputs(e, d, plan, {o.node for o in plan.outputs})
    e.w(depth, "}")
    if ncache and sched.parallel:
        e.w(1, "}")


def launch_lines(plan: KernelPlan, names: dict, lib: str = "self.kf_lib"):
    """The Python that prepares operands, allocates outputs and calls the kernel (an `emit.Launch`)."""
    from .emit import Launch, prep_lines

    setup, outs, args = prep_lines(plan, names)
    call_args = [args[role] for _, role in signature(plan, Schedule())]
    return Launch(setup, outs, [f"{lib}.{plan.name}({', '.join(call_args)})"])
