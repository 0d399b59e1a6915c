"""C++ (OpenMP) kernels for the CPU target, in the `ctypes` candidate format (`platforms.cpu.compile_cpp`).

Schedule knobs and what they change in the emitted code:
- `parallel`: `#pragma omp parallel for` over rows (row kernels) or (row, chunk) tasks (elementwise kernels, their
  chunks cut so that every thread gets several tasks, down to 1024 elements a task);
- `vectorize`: `#pragma omp simd` on inner loops with `reduction(...)` clauses, `__restrict__` pointers, and
  inline polynomial exp/log/tanh/erf that the compiler can vectorize (libm calls otherwise);
- `block`: elementwise kernels work in 4096-element chunks; row kernels keep expensive intermediates (exp, erf, ...)
  in a per-thread row cache instead of recomputing them in the write pass, and schedule rows dynamically;
- `unroll`: `-funroll-loops`, and `#pragma GCC unroll 4` on scalar inner loops or `simdlen(16)` (two vectors
  per iteration, independent accumulators) on vectorized ones.
"""

from __future__ import annotations

from .cexprs import half_math
from .cfamily import COMMON_FNS, CPP, ERF_TAIL, SCALAR_FNS, CWriter, math_wrappers, row_offset_fn
from ..plan.passes import RowProgram, row_program
from ..plan.plans import KernelPlan
from ..schedule import Schedule

SCALAR_MATH = "\n" + math_wrappers(CPP, SCALAR_FNS)

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
""" + ERF_TAIL + r"""
static inline float kf_log1p(float x) { return std::fabs(x) < 1e-4f ? x * (1.0f - 0.5f * x) : kf_log(1.0f + x); }
static inline float kf_expm1(float x) { return std::fabs(x) < 1e-5f ? x + 0.5f * x * x : kf_exp(x) - 1.0f; }
"""

COMMON_MATH = "\n" + math_wrappers(CPP, COMMON_FNS) + row_offset_fn(CPP)

HALF_BITS = r"""
static inline unsigned int kf_as_uint(float f) { unsigned int b; std::memcpy(&b, &f, 4); return b; }
static inline float kf_as_float(unsigned int b) { float f; std::memcpy(&f, &b, 4); return f; }
"""

_PARAM = {"kf_bf16": "uint16_t", "kf_f16": "uint16_t"}  # half storage as the callers' signature parsers name it

PW_CHUNK = 65536
PW_BLOCK_CHUNK = 4096
PW_MIN_CHUNK = 1024  # a parallel elementwise task's least share: below it, scheduling costs more than it spreads
PW_TASKS_PER_THREAD = 4


def cflags(sched: Schedule) -> tuple[str, ...]:
    flags = ["-fno-math-errno", "-fno-trapping-math"]
    if sched.unroll:
        flags.append("-funroll-loops")
    return tuple(flags)


def source(plans: list[KernelPlan], sched: Schedule) -> str:
    parts = ["#include <cmath>", "#include <cstdint>", "#include <cstring>", "#include <algorithm>",
             "#include <vector>", *(["#include <omp.h>"] if sched.parallel else []),
             VECTOR_MATH if sched.vectorize else SCALAR_MATH, COMMON_MATH]
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


class CppWriter(CWriter):
    """The C++ dialect of the shared writer, with the OpenMP pragmas of the CPU's loops."""

    dialect = CPP

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


def kernel(plan: KernelPlan, sched: Schedule) -> str:
    e = CppWriter(plan, sched)
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
    return e.text()


def _pointwise_body(e: CppWriter, plan: KernelPlan, sched: Schedule, prog: RowProgram) -> None:
    if sched.parallel and not sched.block:
        # enough (row, chunk) tasks for every thread: one 65536-element row (a 256 x 256 elementwise tensor,
        # flattened) was one task, so the parallel loop ran on one thread
        e.w(1, f"const int64_t kf_want = {PW_TASKS_PER_THREAD} * (int64_t)omp_get_max_threads();")
        e.w(1, "const int64_t kf_per_row = rows >= kf_want ? 1 : (kf_want + std::max<int64_t>(rows, 1) - 1) / "
               "std::max<int64_t>(rows, 1);")
        e.w(1, f"const int64_t CH = std::max<int64_t>({PW_MIN_CHUNK}, std::min<int64_t>({PW_CHUNK}, "
               "(cols + kf_per_row - 1) / kf_per_row));")
    else:
        e.w(1, f"const int64_t CH = {PW_BLOCK_CHUNK if sched.block else PW_CHUNK};")
    e.w(1, "const int64_t nch = cols > 0 ? (cols + CH - 1) / CH : 0;")
    e.w(1, "const int64_t ntask = rows * nch;")
    if sched.parallel:
        e.w(1, "#pragma omp parallel for schedule(static)")
    e.w(1, "for (int64_t t = 0; t < ntask; ++t) {")
    e.w(2, "const int64_t r = t / nch;")
    e.w(2, "const int64_t c0 = (t - r * nch) * CH;")
    e.w(2, "const int64_t c1 = std::min(cols, c0 + CH);")
    e.row_begin(2, prog, outputs=False)
    e.out_pointers(2)
    for loop in prog.loops:
        e.serial_pass(2, loop, prog, lo="c0", hi="c1")
    e.guarded_row_outputs(2, "c0 == 0")
    e.w(1, "}")
    if any(o.level == "R" for o in plan.outputs):
        # rows with no columns still get their row values
        e.w(1, "if (cols == 0) {")
        e.w(2, "for (int64_t r = 0; r < rows; ++r) {")
        e.row_begin(3, prog, outputs=False)
        e.store_row_outputs(3)
        e.w(2, "}")
        e.w(1, "}")


def _row_body(e: CppWriter, plan: KernelPlan, sched: Schedule, prog: RowProgram) -> None:
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
    e.out_pointers(d)
    e.row_nodes(d, prog.row_nodes_by_pass.get(0, []))
    e.serial_row(d, prog, cache_index=cache_index)
    e.w(depth, "}")
    if ncache and sched.parallel:
        e.w(1, "}")


def launch_lines(plan: KernelPlan, names: dict, lib: str = "self.kf_lib"):
    """The Python that prepares operands, allocates outputs and calls the kernel (an `emit.Launch`)."""
    from .emit import Launch, prep_lines

    setup, outs, args = prep_lines(plan, names)
    call_args = [args[role] for _, role in signature(plan, Schedule())]
    return Launch(setup, outs, [f"{lib}.{plan.name}({', '.join(call_args)})"])
