"""The column kernels (`lower.colops.ColOp`) in C++ (OpenMP) and CUDA, their launch lines, and the host helpers
every writer's column launches share.

The input is viewed as (O, R, I) with its own strides (`kf_col_view`: no copy where each block of dims is linear).
One lane owns output column (o, i) and walks r with stride sR: on the CPU a task is (o, a chunk of up to 256
consecutive i), each pass over r an inner loop over the chunk that the compiler vectorizes (contiguous when sI is
1); on the GPU one thread a column, consecutive threads on consecutive i (coalesced), except the reductions to one
value (`SPLIT_KINDS`: k threads a column, `cuda.colsplit`). Row scans (I == 1, along the last dim) run one row a
lane on the CPU and one row a warp on the GPU (a shuffle scan of 32 elements at a time with a carry). `bnstats`
(BatchNorm's per-channel mean and biased variance of x viewed as (N, C, S)): one channel a task on the CPU, two
passes with double accumulators; on the GPU, `cuda.bnstats` (a block a channel, or a few long ones split).

Sums and the softmax denominators accumulate in double, as the row kernels do; cumprod accumulates as PyTorch does
on the device (double on the CPU, float on the GPU), so overflow and underflow happen where PyTorch's do.
"""

from __future__ import annotations

from ...pyast import parse_ast
from . import pool_kernels
from .cuda.bnstats import bnstats_call, cuda_bnstats
from .cuda.colsplit import SPLIT_COLS, cuda_split_column, shared_bytes
from .col_programs import expand, out_type, program, r_loop_head, row_loads, row_params
from .col_chains import c_functions, c_post, c_read, c_row_loads, row_args, row_arrays
from ..lower.colops import ColOp
from ..schedule import Schedule

# the kinds whose CUDA kernel reduces each column to one value: its rows may be shared among threads (`kf_col_split`)
SPLIT_KINDS = ("reduce", "argmax", "argmin")

# ColOp output as the launch allocates it, per kind
COL_HELPERS = '''

def kf_col_block(shape, st, a, b):
    """(size, stride) of dims [a, b) as one dim, or None when their strides do not chain."""
    n, s, nxt = 1, 1, None
    for d in range(b - 1, a - 1, -1):
        if shape[d] == 1:
            continue
        if nxt is None:
            s = st[d]
        elif st[d] != nxt:
            return None
        n *= shape[d]
        nxt = st[d] * shape[d]
    return n, s


def kf_col_view(t, lo, hi):
    """t viewed as (O, R, I) over dims [:lo], [lo:hi], [hi:]: (memory the kernel indexes, O, R, I, sO, sR, sI);
    a copy only where a block's strides do not chain."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        raise ValueError("synthesized column kernel: expects a float32 tensor")
    if len(t.shape) < hi:
        raise ValueError(f"synthesized column kernel: expects at least {hi} dims, got shape {tuple(t.shape)}")
    blocks = [kf_col_block(t.shape, t.stride(), a, b) for a, b in ((0, lo), (lo, hi), (hi, t.dim()))]
    if any(b is None for b in blocks):
        t = t.contiguous()
        blocks = [kf_col_block(t.shape, t.stride(), a, b) for a, b in ((0, lo), (lo, hi), (hi, t.dim()))]
    if not t.is_contiguous():
        span = 1 + sum((s - 1) * x for s, x in zip(t.shape, t.stride())) if t.numel() else 0
        t = torch.as_strided(t, (span,), (1,))
    (O, sO), (R, sR), (I, sI) = blocks
    return t, O, R, I, sO, sR, sI


def kf_col_split(cols, R, sms):
    """Threads k sharing each of a CUDA column reduction's `cols` columns of R rows (its block is 128 columns by k):
    doubled, up to 8, while the threads are fewer than 16 rounds of the GPU's resident ones (2048 an SM) and each
    keeps at least 16 rows; 1 when the columns alone fill the GPU that often, or are short."""
    k = 1
    while k < 8 and cols * k < sms * 2048 * 16 and R >= 2 * k * 16:
        k *= 2
    return k


def kf_col_shape(shape, lo, hi, keepdim):
    return tuple(shape[:lo]) + ((1,) * (hi - lo) if keepdim else ()) + tuple(shape[hi:])


def kf_pool_view(t, k, s, p, dil, ceil):
    """t as a window kernel reads it (contiguous float32), its lead dims' size B as one, and the pooled dims' input
    and output sizes (PyTorch's pooled length: with ceil_mode the last window starts inside the input or its left
    padding)."""
    d = len(k)
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.dim() <= d:
        raise ValueError(f"synthesized window kernel: expects a float32 tensor of more than {d} dims")
    t = t.contiguous()
    L = tuple(t.shape[t.dim() - d:])
    O = []
    for n, kk, ss, pp, dd in zip(L, k, s, p, dil):
        num = n + 2 * pp - dd * (kk - 1) - 1
        o = (-(-num // ss) if ceil else num // ss) + 1
        if ceil and (o - 1) * ss >= n + pp:
            o -= 1
        if o < 1:
            raise ValueError(f"synthesized window kernel: input size {n} is too small for a window of {kk}")
        O.append(o)
    B = 1
    for n in t.shape[:t.dim() - d]:
        B *= n
    return t, B, L, tuple(O)


def kf_pool_rows(t, x, d):
    """A tensor read by a window or column kernel's fused chains as one float32 value per row of x: t broadcast to
    x's dims but the last d (size 1 along those: pooled, or after the reduced ones), contiguous."""
    lead = tuple(x.shape[:x.dim() - d])
    t = torch.as_tensor(t, dtype=torch.float32, device=x.device)
    return t.broadcast_to(lead + (1,) * d).reshape(-1).contiguous()


def kf_bn_update(mean, var, tracked, stats, count, momentum):
    """Training-mode BatchNorm's running statistics, updated as PyTorch does; returns the batch mean."""
    with torch.no_grad():
        if tracked is not None:
            tracked.add_(1)
        f = momentum if momentum is not None else 1.0 / float(tracked.item())
        mean.mul_(1.0 - f).add_(stats[0], alpha=f)
        var.mul_(1.0 - f).add_(stats[1] * (count / (count - 1)), alpha=f)
    return stats[0]
'''.rstrip()


def col_helpers_for(program: str) -> str:
    """The column helpers `program` calls (kf_col_view brings kf_col_block), in COL_HELPERS' order."""
    text = COL_HELPERS.strip()
    lines = text.splitlines()
    want = {n for n in ("kf_col_view", "kf_col_split", "kf_col_shape", "kf_pool_view", "kf_pool_rows",
                        "kf_bn_update") if f"{n}(" in program}
    if "kf_col_view" in want:
        want.add("kf_col_block")
    return "\n\n\n".join("\n".join(lines[node.lineno - 1:node.end_lineno]) for node in parse_ast(text).body
                          if node.name in want)


def out_lines(col: ColOp, x: str, device: str = "xc.device") -> list[str]:
    """Lines allocating `out` for a column launch (after `kf_col_view` gave xc, O, R, I, ...)."""
    shape = "(2, R)" if col.kind == "bnstats" else (
        f"tuple({x}.shape)" if col.same_shape else f"kf_col_shape({x}.shape, {col.lo}, {col.hi}, {col.keepdim})")
    dtype = "torch.int64" if col.out_dtype == "int64" else "torch.float32"
    return [f"out = torch.empty({shape}, dtype={dtype}, device={device})"]


def launch_lines(col: ColOp, names: dict, call: str) -> list[str]:
    """The launch of one column kernel; `call` is the kernel call over (xc, out, O, R, I, sO, sR, sI)."""
    x = names[col.x]
    lines = [f"# {col.kname}: {col.label} (column kernel)",
             f"xc, O, R, I, sO, sR, sI = kf_col_view({x}, {col.lo}, {col.hi})"]
    lines += row_arrays(col, names, x, f"{x}.dim() - {col.hi}")  # one value per (o, r)
    lines += out_lines(col, x)
    lines.append(call)
    lines.append(f"{names[col.name]} = out")
    return lines


def cpu_launch(col: ColOp, names: dict) -> list[str]:
    if col.kind == "pool":
        return pool_kernels.cpu_launch(col, names)
    return launch_lines(col, names, f"self.kf_lib.{col.kname}(xc, out, {row_args(col)}O, R, I, sO, sR, sI)")


def cuda_launch(col: ColOp, names: dict) -> list[str]:
    if col.kind == "pool":
        return pool_kernels.cuda_launch(col, names)
    if col.kind == "bnstats":  # a block a channel, or several (`cuda.split`) for a few long channels
        return launch_lines(col, names, bnstats_call(col))
    if col.kind == "scan":
        # I == 1: a row scan, one row a warp; else one column a thread
        return launch_lines(col, names, "\n".join([
            "if I == 1:",
            f"    self.kf_mod.{col.kname}row_params(grid=(max(1, min((O + 7) // 8, self.kf_sms * 16)),), block=(256,), "
            f"args=(xc, out, {row_args(col)}O, R, sO, sR))",
            "else:",
            f"    self.kf_mod.{col.kname}(grid=(max(1, min((O * I + 255) // 256, self.kf_sms * 16)),), "
            f"block=(256,), args=(xc, out, {row_args(col)}O, R, I, sO, sR, sI))"]))
    if col.kind in SPLIT_KINDS:  # SPLIT_COLS columns by k threads a block (`kf_col_split`), a block a tile of columns
        c = SPLIT_COLS
        return launch_lines(col, names, "\n".join([
            "kf_k = kf_col_split(O * I, R, self.kf_sms)",
            f"self.kf_mod.{col.kname}(grid=(max(1, min((O * I + {c - 1}) // {c}, {2**31 - 1})),), "
            f"block=({c}, kf_k), args=(xc, out, {row_args(col)}O, R, I, sO, sR, sI), "
            f"shared_mem={shared_bytes(col)} * kf_k if kf_k > 1 else 0)"]))
    return launch_lines(col, names, f"self.kf_mod.{col.kname}(grid=(max(1, min((O * I + 255) // 256, "
                                    f"self.kf_sms * 16)),), block=(256,), args=(xc, out, {row_args(col)}O, R, I, sO, "
                                    "sR, sI))")


# ----------------------------------------------------------------------------------------------- kernel bodies









def _cpu_column(col: ColOp, sched: Schedule) -> list[str]:
    prog = program(col, gpu=False)
    simd = "#pragma omp simd" if sched.vectorize else ""
    lines = [f"// {col.label}: column kernel ({col.kind}) over x viewed as (O, R, I), a lane an output column",
             f'extern "C" void {col.kname}(const float* x, {out_type(col, False)}* out, {row_params(col)}int64_t O, '
             f"int64_t R, int64_t I, int64_t sO, int64_t sR, int64_t sI) {{"]
    if col.kind == "scan":
        # along the last dim: one row a lane, the row in order
        lines += ["    if (I == 1) {"]
        if sched.parallel:
            lines.append("        #pragma omp parallel for schedule(static)")
        (acc_t, _, init), = prog["state"]
        sym = "+" if col.op == "sum" else "*"
        r_iter = r_loop_head("int64_t", col.reverse, " ")
        lines += ["        for (int64_t o = 0; o < O; ++o) {",
                  f"            {acc_t} acc = {init};",
                  "            const float* xo = x + o * sO;",
                  "            float* oo = out + o * R;",
                  f"            {r_iter} {row_loads(col)}acc {sym}= ({acc_t}){c_read(col, 'xo[r * sR]')}; "
                  f"oo[r] = {c_post(col, '(float)acc')}; }}",
                  "        }", "        return;", "    }"]
    lines += ["    int64_t ch = 256;",
              "    while (ch > 16 && O * ((I + ch - 1) / ch) < 64) ch /= 2;  // enough tasks for the threads",
              "    const int64_t nch = (I + ch - 1) / ch;"]
    if sched.parallel:
        lines.append("    #pragma omp parallel for schedule(static)")
    lines += ["    for (int64_t t = 0; t < O * nch; ++t) {",
              "        const int64_t o = t / nch;",
              "        const int64_t i0 = (t - o * nch) * ch;",
              "        const int64_t n = std::min(ch, I - i0);",
              "        const float* xo = x + o * sO + i0 * sI;"]
    for ctype, name, init in prog["state"]:
        lines.append(f"        {ctype} {name}_[256];")
        lines.append(f"        for (int64_t j = 0; j < n; ++j) {name}_[j] = {init};")
    r_loop = r_loop_head("int64_t", col.reverse, "\n            ")
    for stmt in prog["passes"]:
        body = expand(stmt, True).replace("OUTR", "out[(o * R + r) * I + i0 + j]")
        lines.append(f"        {r_loop}")
        lines.append("            const float* xr = xo + r * sR;")
        lines += c_row_loads(col, "o * R + r", "            ")
        for cond, load in (("if (sI == 1) {", "xr[j]"), ("} else {", "xr[j * sI]")):
            lines.append(f"            {cond}")
            if simd:
                lines.append(f"                {simd}")
            lines.append(f"                for (int64_t j = 0; j < n; ++j) {{ const float v = {c_read(col, load)}; "
                         f"{body} }}")
        lines += ["            }", "        }"]
    if prog["final"]:
        fin = expand(prog["final"], True).replace("OUT", "out[o * I + i0 + j]")
        lines.append(f"        for (int64_t j = 0; j < n; ++j) {{ {fin} }}")
    lines += ["    }", "}"]
    return lines


def _cpu_bnstats(col: ColOp, sched: Schedule) -> list[str]:
    par = ["    #pragma omp parallel for schedule(static)"] if sched.parallel else []
    red = "#pragma omp simd reduction(+:s)" if sched.vectorize else ""

    def sweep(term: str) -> list[str]:
        return ["        s = 0.0;",
                "        for (int64_t n = 0; n < O; ++n) {",
                "            const float* xr = x + n * sO + c * sR;",
                "            if (sI == 1) {", f"                {red}",
                f"                for (int64_t j = 0; j < I; ++j) {{ {term.format(v='xr[j]')} }}",
                "            } else {", f"                {red}",
                f"                for (int64_t j = 0; j < I; ++j) {{ {term.format(v='xr[j * sI]')} }}",
                "            }", "        }"]

    simd = "#pragma omp simd" if sched.vectorize else ""
    # one value per (sample, channel) (BatchNorm1d): a task a chunk of channels walking the samples, the lanes on
    # consecutive channels (a task a channel would read one float of every cache line it touches)
    flat = ["    if (I == 1) {"] + ["    " + line for line in par] + [
        "        for (int64_t c0 = 0; c0 < R; c0 += 64) {",
        "            const int64_t m = std::min((int64_t)64, R - c0);",
        "            double s_[64], q_[64];",
        "            for (int64_t j = 0; j < m; ++j) { s_[j] = 0.0; q_[j] = 0.0; }",
        "            for (int64_t n = 0; n < O; ++n) {",
        "                const float* xr = x + n * sO + c0 * sR;", f"                {simd}",
        "                for (int64_t j = 0; j < m; ++j) s_[j] += (double)xr[j * sR];", "            }",
        "            for (int64_t j = 0; j < m; ++j) s_[j] /= cnt;",
        "            for (int64_t n = 0; n < O; ++n) {",
        "                const float* xr = x + n * sO + c0 * sR;", f"                {simd}",
        "                for (int64_t j = 0; j < m; ++j) { const double d = (double)xr[j * sR] - s_[j]; "
        "q_[j] += d * d; }", "            }",
        "            for (int64_t j = 0; j < m; ++j) { out[c0 + j] = (float)s_[j]; out[R + c0 + j] = "
        "(float)(q_[j] / cnt); }",
        "        }", "        return;", "    }"]
    return ([f"// {col.label}: per-channel batch statistics (mean, biased variance) of x viewed as (N, C, S)",
             f'extern "C" void {col.kname}(const float* x, float* out, int64_t O, int64_t R, int64_t I, '
             "int64_t sO, int64_t sR, int64_t sI) {",
             "    const double cnt = (double)O * (double)I;"] + flat + par +
            ["    for (int64_t c = 0; c < R; ++c) {", "        double s;"] + sweep("s += (double){v};") +
            ["        const double mean = s / cnt;"] +
            sweep("const double d = (double){v} - mean; s += d * d;") +
            ["        out[c] = (float)mean;", "        out[R + c] = (float)(s / cnt);", "    }", "}"])








def cpu_source(cols: list[ColOp], sched: Schedule) -> str:
    """The C++ of the column kernels (after the CPU prelude: kf_exp, kf_log)."""
    if not cols:
        return ""
    parts = ["static inline bool kf_isinf(float v) { return v == INFINITY || v == -INFINITY; }"]
    for col in cols:
        write = {"bnstats": _cpu_bnstats, "pool": pool_kernels.cpu_pool}.get(col.kind, _cpu_column)
        parts.append("\n".join(c_functions(col, "static inline") + write(col, sched)))
    return "\n".join(parts) + "\n"


# ----------------------------------------------------------------------------------------------- CUDA

def _cuda_column(col: ColOp) -> list[str]:
    prog = program(col, gpu=True)
    lines = [f"// {col.label}: column kernel ({col.kind}), a thread an output column (coalesced over i)",
             f'extern "C" __global__ void {col.kname}(const float* __restrict__ x, {out_type(col, True)}* '
             f"__restrict__ out, {row_params(col, ' __restrict__')}long long O, long long R, long long I, long long sO, "
             "long long sR, long long sI) {",
             "    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < O * I; "
             "t += (long long)gridDim.x * blockDim.x) {",
             "        const long long o = t / I, i = t - o * I;",
             "        const float* xo = x + o * sO + i * sI;"]
    for ctype, name, init in prog["state"]:
        lines.append(f"        {ctype} {name} = {init};")
    r_loop = r_loop_head("long long", col.reverse, " ")
    for stmt in prog["passes"]:
        body = expand(stmt, False).replace("OUTR", "out[(o * R + r) * I + i]")
        lines.append(f"        {r_loop} {row_loads(col)}const float v = {c_read(col, 'xo[r * sR]')}; {body} }}")
    if prog["final"]:
        lines.append("        " + expand(prog["final"], False).replace("OUT", "out[t]"))
    lines += ["    }", "}"]
    if col.kind == "scan":
        lines += _cuda_row_scan(col)
    return lines


def _cuda_row_scan(col: ColOp) -> list[str]:
    ident, sym = ("0.0f", "+") if col.op == "sum" else ("1.0f", "*")
    r = "R - 1 - (r0 + lane)" if col.reverse else "r0 + lane"
    return [f"// {col.label}: row scan along the last dim, a warp a row (shuffle scans of 32 elements, a carry)",
            f'extern "C" __global__ void {col.kname}row_params(const float* __restrict__ x, float* __restrict__ out, '
            f"{row_params(col, ' __restrict__')}long long O, long long R, long long sO, long long sR) {{",
            "    const int lane = threadIdx.x & 31;",
            "    const long long per = blockDim.x >> 5;",
            "    for (long long o = blockIdx.x * per + (threadIdx.x >> 5); o < O; o += (long long)gridDim.x * per) {",
            f"        float carry = {ident};",
            "        for (long long r0 = 0; r0 < R; r0 += 32) {",
            "            const bool ok = r0 + lane < R;",
            f"            const long long r = {r};",
            *c_row_loads(col, "ok ? o * R + r : 0", "            "),
            f"            float v = ok ? {c_read(col, 'x[o * sO + r * sR]')} : {ident};",
            "            for (int d = 1; d < 32; d <<= 1) {",
            "                const float u = __shfl_up_sync(0xffffffffu, v, d);",
            f"                if (lane >= d) v = u {sym} v;",
            "            }",
            f"            v = carry {sym} v;",
            f"            if (ok) out[o * R + r] = {c_post(col, 'v')};",
            "            carry = __shfl_sync(0xffffffffu, v, 31);",
            "        }", "    }", "}"]


def cuda_source(cols: list[ColOp]) -> str:
    """The CUDA of the column kernels (after the CUDA prelude: kf_exp, kf_log)."""
    if not cols:
        return ""
    parts = ["__device__ __forceinline__ bool kf_isinf(float v) { return isinf(v); }"]
    for col in cols:
        write = {"bnstats": cuda_bnstats, "pool": pool_kernels.cuda_pool}.get(
            col.kind, cuda_split_column if col.kind in SPLIT_KINDS else _cuda_column)
        parts.append("\n".join(c_functions(col, "__device__ __forceinline__") + write(col)))
    return "\n".join(parts) + "\n"
