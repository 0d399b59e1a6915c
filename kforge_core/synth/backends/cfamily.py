"""The C-family kernel writer the CPU (C++), CUDA and Metal backends share: `CWriter` writes the statements every
one of their kernels is made of (row pointers, row values, a pass of one thread over a row, element bodies,
reductions into thread accumulators, row outputs), and a `Dialect` says how each language spells what differs
(integer and accumulator types, address spaces, how an accumulator becomes the row's value, math function names).
Each backend subclasses `CWriter` with its dialect for what only it writes (OpenMP pragmas, CUDA vector loads);
the kernels' overall shape (which thread takes which row) stays in the backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cexprs import cat_lines, flit, load, node_expr, store, value_ctype
from ..plan.plans import KernelPlan
from ..schedule import Schedule

# a reduction's identity: what a thread's accumulator starts from
IDENT = {"sum": "0.0f", "mean": "0.0f", "max": "-INFINITY", "min": "INFINITY"}


@dataclass(frozen=True)
class Dialect:
    name: str
    index_t: str  # the 64-bit integer of rows, columns and offsets
    fn: str  # the qualifiers of a helper function in the prelude
    space: str  # the address space of a pointer into a tensor ("device " in Metal)
    # a thread's sum over a row: its type and zero (a sequential float sum over a long row drifts past the fp32
    # tolerance, 32768 terms: ~1e-3; a double keeps the plain versions correct where the language has one), what
    # each term is cast to, and how the accumulator becomes the row's float value ({acc}), for a mean and otherwise
    sum_t: str
    zero: str
    term_cast: str
    mean_value: str
    acc_value: str
    math: str  # the math library's name of a float function, as a format of its plain name ("std::{}")
    math_names: dict = field(default_factory=dict)  # exceptions to `math`: plain name -> the library's name


CPP = Dialect("c++", "int64_t", "static inline", "", "double", "0.0", "(double)", "(float)({acc} / (double)cols)",
              "(float){acc}", "std::{}", {"rint": "std::nearbyint"})
CUDA = Dialect("cuda", "long long", "__device__ __forceinline__", "", "double", "0.0f", "",
               "(float)({acc} / (double)cols)", "(float)({acc})", "{}f")
# Metal has no double: its sums stay float (its writer is not yet run on Apple hardware)
METAL = Dialect("metal", "long", "static inline", "device ", "float", "0.0f", "", "{acc} / (float)cols", "{acc}",
                "precise::{}", {n: n for n in ("fabs", "floor", "ceil", "rint", "trunc")})

# the end of a kf_erf written out (r: the rational approximation's result): for small |x| a Taylor series keeps the
# relative accuracy the rational form loses near 0
ERF_TAIL = r"""    const float z = x * x;
    const float taylor = x * (1.12837916709551257f + z * (-0.376126389031837524f + z * (0.112837916709551257f
                         + z * -0.0268661706451312522f)));
    return ax < 0.25f ? taylor : (x < 0.0f ? -r : r);
}"""

# the kf_* wrappers every dialect's prelude defines over its math library, in prelude order (`pow` takes two)
SCALAR_FNS = ("exp", "log", "tanh", "erf", "log1p", "expm1")
COMMON_FNS = ("fabs", "sqrt", "pow", "sin", "cos", "tan", "atan", "sinh", "cosh", "asin", "acos", "floor", "ceil",
              "rint", "trunc")


def math_wrappers(d: Dialect, names: tuple[str, ...]) -> str:
    """The prelude lines defining kf_<name> over the dialect's math library, one a line."""
    lines = []
    for n in names:
        lib = d.math_names.get(n, d.math.format(n))
        args, call = ("float a, float b", "a, b") if n == "pow" else ("float x", "x")
        lines.append(f"{d.fn} float kf_{n}({args}) {{ return {lib}({call}); }}\n")
    return "".join(lines)


def row_offset_fn(d: Dialect) -> str:
    """kf_off: where row r of an operand with these row dims and strides starts (the CUDA prelude has its own,
    which also takes the host's (n, s) pair)."""
    i, ptr = d.index_t, f"{d.space}const {d.index_t}*"
    return (f"{d.fn} {i} kf_off({i} r, {ptr} shape, {ptr} st, int nl) {{\n"
            f"    {i} off = 0;\n"
            "    for (int d = nl - 1; d >= 0; --d) {\n"
            f"        const {i} n = shape[d];\n"
            "        off += (r % n) * st[d];\n"
            "        r /= n;\n"
            "    }\n"
            "    return off;\n"
            "}\n")


class CWriter:
    """The statements of one kernel in a dialect; `lines` collects them."""

    dialect: Dialect  # each language's writer sets its own

    def __init__(self, plan: KernelPlan, sched: Schedule):
        self.plan = plan
        self.sched = sched
        self.by = {n.name: n for n in plan.nodes}
        self.lines: list[str] = []
        self.general = [s.index for s in plan.slots if s.kind == "tensor" and s.mode == "general"]
        self.squares: dict = {}  # mean reduction -> the reduction of squared deviations folded into its pass
        self.col = "c"  # the column `compute` is at

    def w(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    @staticmethod
    def var(name: str) -> str:
        return "v_" + name.replace(".", "_")

    def operand(self, o) -> str:
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
        if o[0] == "col":
            return f"(float)({self.col})"
        raise ValueError(o)

    def offset(self, s) -> str:
        """Where row r of tensor slot s starts in its operand."""
        if s.mode == "rowmajor":
            return "r * cols" if s.inner == 1 else "r"
        if s.mode == "zero":
            return "0"
        nl = self.plan.nl
        return f"kf_off(r, meta, meta + {nl} + {self.general.index(s.index) * nl}, {nl})"

    def row_setup(self, depth: int, outputs: bool = False) -> None:
        """Row r's pointer into each tensor operand and its per-row values; with `outputs`, also the pointers into
        the element-level outputs (`out_pointers`)."""
        space = self.dialect.space
        for s in self.plan.slots:
            if s.kind != "tensor":
                continue
            self.w(depth, f"{space}const {s.ctype}* p{s.index} = a{s.index} + {self.offset(s)};")
            if s.inner == 0:
                self.w(depth, f"const {value_ctype(s.ctype)} r{s.index} = {load(s.ctype, f'p{s.index}[0]')};")
        if outputs:
            self.out_pointers(depth)

    def row_begin(self, depth: int, prog, outputs: bool = True) -> None:
        """`row_setup`, then the row values computed before the first pass."""
        self.row_setup(depth, outputs)
        self.row_nodes(depth, prog.row_nodes_by_pass.get(0, []))

    def out_pointers(self, depth: int) -> None:
        for j, o in enumerate(self.plan.outputs):
            if o.level == "E":
                self.w(depth, f"{self.dialect.space}{o.dtype}* q{j} = o{j} + r * cols;")

    def row_nodes(self, depth: int, names: list[str]) -> None:
        for name in names:
            n = self.by[name]
            self.w(depth, f"const {n.dtype} {self.var(name)} = {node_expr(n, self.operand)};")

    def compute(self, depth: int, loop, col: str = "c") -> None:
        """The loop's element-level values at column `col` (a `cat` reads only the piece `col` falls in; a
        `("col",)` operand is its index)."""
        self.col = col
        for name in loop.compute:
            n = self.by[name]
            if n.fn == "cat":
                for dd, text in cat_lines(n, self.plan, self.var, self.operand, col=col):
                    self.w(depth + dd, text)
                continue
            self.w(depth, f"const {n.dtype} {self.var(name)} = {node_expr(n, self.operand)};")

    def body(self, depth: int, loop, cache_index: dict | None = None) -> None:
        """One column of a loop at c: its slots' elements, the row cache's values (`cache_index`: node -> its
        array), the computed values, the reductions and the stores."""
        cache_index = cache_index or {}
        for si in loop.slots:
            s = self.plan.slots[si]
            self.w(depth, f"const {value_ctype(s.ctype)} x{si} = {load(s.ctype, f'p{si}[c]')};")
        for name in loop.load:
            self.w(depth, f"const float {self.var(name)} = sc{cache_index[name]}[c];")
        self.compute(depth, loop)
        for name in loop.store_cache:
            self.w(depth, f"sc{cache_index[name]}[c] = {self.var(name)};")
        self.reduce(depth, loop)
        for j in loop.outputs:
            out = self.plan.outputs[j]
            self.w(depth, f"q{j}[c] = {store(out.dtype, self.var(out.node))};")

    def reduce(self, depth: int, loop) -> None:
        """Each reduction's term added into its thread accumulator (and a folded variance's square, `squares`)."""
        for r in loop.reds:
            n = self.by[r]
            src = self.operand(n.operands[0])
            op = n.red["op"]
            if r in self.squares:
                self.w(depth, f"acc_{self.squares[r]} += (double){src} * {src};")
            if op in ("sum", "mean"):
                self.w(depth, f"acc_{r} += {self.dialect.term_cast}{src};")
            elif op == "max":
                self.w(depth, f"acc_{r} = {src} > acc_{r} ? {src} : acc_{r};")
            else:
                self.w(depth, f"acc_{r} = {src} < acc_{r} ? {src} : acc_{r};")

    def loop_pragma(self, depth: int, reductions: list[str]) -> None:
        """What precedes a thread's loop over its columns (OpenMP simd, unrolling); none by default."""

    def acc_init(self, depth: int, reds: list[str], sum_t: str = "", zero: str = "") -> None:
        """Each reduction's thread accumulator; sums as `sum_t` from `zero` (by default the dialect's)."""
        for r in reds:
            op = self.by[r].red["op"]
            if op in ("sum", "mean"):
                self.w(depth, f"{sum_t or self.dialect.sum_t} acc_{r} = {zero or self.dialect.zero};")
            else:
                self.w(depth, f"float acc_{r} = {IDENT[op]};")

    def acc_finish(self, depth: int, reds: list[str]) -> None:
        for r in reds:
            fmt = self.dialect.mean_value if self.by[r].red["op"] == "mean" else self.dialect.acc_value
            self.w(depth, f"const float {self.var(r)} = {fmt.format(acc=f'acc_{r}')};")

    def serial_pass(self, depth: int, loop, prog, lo: str = "0", hi: str = "cols", step: str = "++c",
                    cache_index: dict | None = None, finish=None) -> None:
        """One thread's loop over columns [lo, hi) of its row: a reduction pass's accumulators, the loop, then the
        pass's results (`finish(depth, reds)`, by default `acc_finish`) and the row values that follow them."""
        if loop.kind == "pass":
            self.acc_init(depth, loop.reds)
        self.loop_pragma(depth, loop.reds)
        self.w(depth, f"for ({self.dialect.index_t} c = {lo}; c < {hi}; {step}) {{")
        self.body(depth + 1, loop, cache_index)
        self.w(depth, "}")
        if loop.kind == "pass":
            (finish or self.acc_finish)(depth, loop.reds)
            self.row_nodes(depth, prog.row_nodes_by_pass.get(loop.index, []))

    def serial_row(self, depth: int, prog, guard: str = "", **loop_args) -> None:
        """A thread's passes over its row (`serial_pass` with `loop_args`), then the row-level outputs (each line
        after `guard`)."""
        for loop in prog.loops:
            self.serial_pass(depth, loop, prog, **loop_args)
        self.store_row_outputs(depth, guard)

    def store_row_outputs(self, depth: int, guard: str = "") -> None:
        """o<j>[r] of each row-level output, each line after `guard` (a one-line condition)."""
        for j, o in enumerate(self.plan.outputs):
            if o.level == "R":
                self.w(depth, f"{guard}o{j}[r] = {store(o.dtype, self.var(o.node))};")

    def guarded_row_outputs(self, depth: int, cond: str) -> None:
        """The row-level outputs, stored by the threads meeting `cond` (none written when there are none)."""
        if any(o.level == "R" for o in self.plan.outputs):
            self.w(depth, f"if ({cond}) {{")
            self.store_row_outputs(depth + 1)
            self.w(depth, "}")
