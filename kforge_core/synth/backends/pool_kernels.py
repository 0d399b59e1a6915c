"""The window kernels of pooling (`lower.colops.ColOp` of kind "pool", from `lower.pooling`) in C++ (OpenMP),
CUDA and Triton, and their launch lines.

Every output element reads its own window of the input in place (no padded or unfolded copy): the input is viewed
as (B, L0, ..., L{d-1}) (contiguous, the lead dims as one), the output as (B, O0, ..., O{d-1}). The window's sizes,
strides, paddings and dilations are constants of the kernel; window cells outside the input are skipped, which is
PyTorch's padding for max (padded cells never win) and for avg (they add nothing; whether they count in the
divisor is `count_include_pad`, unless `divisor_override` gives the divisor). The divisor follows PyTorch's
avg_pool: per dim, the window clipped to the padded input (counting padding) or to the input (not counting it).

- C++: a task is one row of outputs along the last dim (up to 256 of them); for each window offset along the last
  dim, the outputs whose cell is inside the input are one contiguous range, updated by a loop the compiler
  vectorizes (contiguous reads at stride 1), so the bounds are checked once per offset, not per element; a task of
  few outputs (a large stride: KernelBench's 11x11 average) walks each output's window instead; a fused prologue
  is computed once per input element of the row segment a task reads (a vectorized loop into a buffer);
- CUDA: one thread an output element (a grid-stride loop), the window loops unrolled;
- Triton: a program takes BLOCK consecutive output elements, the window unrolled (`tl.static_range`), each cell one
  masked load.

Max propagates NaN as PyTorch does (a NaN cell wins and stays); the fused elementwise chains (`ColOp.pre` on every
cell read, `ColOp.post` on every output) are written by `col_chains`.
"""

from __future__ import annotations

from .col_chains import c_post, c_read, c_row_loads, c_row_params, row_args, row_arrays, row_values, triton_chain
from ..lower.colops import ColOp
from ..schedule import Schedule

CPU_CHUNK = 256  # outputs of one task along the last dim (its accumulators)
MAX_BUFFER = 16384  # floats of a task's prologue buffer on the stack (larger strides: the prologue per cell read)
WIDE = 8  # from this many outputs in a task, the vectorized loop over outputs (fewer: a scalar loop over windows)
TRITON_BLOCK = 256


def _dims(col: ColOp) -> int:
    return len(col.pool["k"])


def _params(col: ColOp, index_t: str, restrict: str = "") -> str:
    """The parameters after `out`: the row values' arrays, then the sizes."""
    d = _dims(col)
    return ", ".join(c_row_params(col, restrict) + [f"{index_t} B"] + [f"{index_t} L{i}" for i in range(d)] + [f"{index_t} O{i}" for i in range(d)])


def _divisor_factor(col: ColOp, i: int, o: str, index_t: str) -> str:
    """The avg divisor's factor along dim i for output index `o` (PyTorch's avg_pool rules), an integer expression."""
    w = col.pool
    k, s, p = w["k"][i], w["s"][i], w["p"][i]
    start = f"(({index_t})({o}) * {s} - {p})"
    if w["include_pad"]:
        return f"(({start} + {k} < L{i} + {p} ? {start} + {k} : L{i} + {p}) - {start})"
    return (f"(({start} + {k} < L{i} ? {start} + {k} : L{i}) - ({start} > 0 ? {start} : ({index_t})0))")


def _finish(col: ColOp, acc: str, div: str) -> str:
    """The output value of a window from its accumulator (`div`: the divisor expression of an avg pool)."""
    if col.pool["op"] == "max":
        return acc
    if col.pool["divisor"] is not None:
        return f"{acc} / (float){col.pool['divisor']}"
    return f"{acc} / (float)({div})"


def _cell(col: ColOp, i: int) -> str:
    """The input index along pooled dim i of window cell k{i} of output o{i} (may fall in the padding)."""
    w = col.pool
    return f"o{i} * {w['s'][i]} - {w['p'][i]} + k{i} * {w['dil'][i]}"


def _update(col: ColOp, acc: str) -> str:
    if col.pool["op"] == "max":
        return f"{acc} = (v > {acc} || v != v) ? v : {acc};"
    return f"{acc} += v;"


def _init(col: ColOp) -> str:
    return "-INFINITY" if col.pool["op"] == "max" else "0.0f"


def _header(col: ColOp, where: str) -> str:
    w = col.pool
    win = "x".join(map(str, w["k"]))
    extra = ", ".join(f"{n} {'x'.join(map(str, w[key]))}" for n, key in (("stride", "s"), ("padding", "p"),
                                                                        ("dilation", "dil")))
    return f"// {col.label}: window kernel ({w['op']} over {win}, {extra}), {where}"


# ----------------------------------------------------------------------------------------------- C++ (OpenMP)

def cpu_pool(col: ColOp, sched: Schedule) -> list[str]:
    w, d = col.pool, _dims(col)
    last = d - 1
    simd = ["#pragma omp simd"] if sched.vectorize else []
    lines = [_header(col, "each output row's windows read in place, a lane an output"),
             f'extern "C" void {col.kname}(const float* x, float* out, {_params(col, "int64_t")}) {{',
             f"    const int64_t CH = {CPU_CHUNK};",
             f"    const int64_t nch = (O{last} + CH - 1) / CH;",
             "    const int64_t ntask = B" + "".join(f" * O{i}" for i in range(last)) + " * nch;"]
    if sched.parallel:
        lines.append("    #pragma omp parallel for schedule(static)")
    lines += ["    for (int64_t t = 0; t < ntask; ++t) {",
              "        const int64_t row = t / nch;",
              "        const int64_t j0 = (t - row * nch) * CH;",
              f"        const int64_t n = std::min(CH, O{last} - j0);",
              "        int64_t q = row;"]
    for i in reversed(range(last)):
        lines.append(f"        const int64_t o{i} = q % O{i}; q /= O{i};")
    lines.append("        const float* xb = x + q * (" + " * ".join(f"L{i}" for i in range(d)) + ");")
    lines += c_row_loads(col, "q", "        ")
    lines.append(f"        float* ob = out + row * O{last} + j0;")
    lines += [f"        float acc[{CPU_CHUNK}];", f"        for (int64_t j = 0; j < n; ++j) acc[j] = {_init(col)};"]
    depth, base = 2, "xb"
    for i in range(last):
        ind = "    " * depth
        inner = " * ".join(f"L{j}" for j in range(i + 1, d))
        lines += [f"{ind}for (int64_t k{i} = 0; k{i} < {w['k'][i]}; ++k{i}) {{",
                  f"{ind}    const int64_t i{i} = {_cell(col, i)};",
                  f"{ind}    if (i{i} < 0 || i{i} >= L{i}) continue;",
                  f"{ind}    const float* x{i} = {base} + i{i} * ({inner});"]
        base, depth = f"x{i}", depth + 1
    ind = "    " * depth
    k, s, p, dil = w["k"][last], w["s"][last], w["p"][last], w["dil"][last]
    span = CPU_CHUNK * s + (k - 1) * dil + 1
    if col.pre and span <= MAX_BUFFER:
        # the prologue once per input element of the row segment the task's windows cover, vectorized, into a
        # buffer the windows then read (not once per window cell: overlapping windows would repeat it)
        lines += [f"{ind}const int64_t c0 = std::max((int64_t)0, j0 * {s} - {p});",
                  f"{ind}const int64_t c1 = std::min(L{last}, (j0 + n - 1) * {s} - {p} + {(k - 1) * dil + 1});",
                  f"{ind}float buf[{span}];"]
        lines += [f"{ind}{x}" for x in simd]
        lines.append(f"{ind}for (int64_t c = c0; c < c1; ++c) buf[c - c0] = {c_read(col, f'{base}[c]')};")
        load = f"const float v = buf[(j0 + j) * {s} + off - c0];"
        cell = f"const float v = buf[st + kl * {dil} - c0];"
    else:
        load = f"const float v = {c_read(col, f'{base}[(j0 + j) * {s} + off]')};"
        cell = f"const float v = {c_read(col, f'{base}[st + kl * {dil}]')};"
    lines += [f"{ind}if (n >= {WIDE}) {{",
              f"{ind}    for (int64_t kl = 0; kl < {k}; ++kl) {{",
              f"{ind}        // outputs j whose cell (j0 + j) * {s} + off lies inside the input: one range",
              f"{ind}        const int64_t off = kl * {dil} - {p};",
              f"{ind}        const int64_t jlo = std::max((int64_t)0, (off < 0 ? (-off + {s - 1}) / {s} : 0) - j0);",
              f"{ind}        const int64_t top = L{last} - 1 - off;",
              f"{ind}        const int64_t jhi = top < 0 ? 0 : std::min(n, top / {s} + 1 - j0);"]
    lines += [f"{ind}        {x}" for x in simd]
    lines += [f"{ind}        for (int64_t j = jlo; j < jhi; ++j) {{ {load} {_update(col, 'acc[j]')} }}",
              f"{ind}    }}",
              f"{ind}}} else {{  // a few outputs along the row (large strides): each output's window in turn",
              f"{ind}    for (int64_t j = 0; j < n; ++j) {{",
              f"{ind}        const int64_t st = (j0 + j) * {s} - {p};",
              f"{ind}        const int64_t klo = st < 0 ? (-st + {dil - 1}) / {dil} : 0;",
              f"{ind}        const int64_t khi = L{last} - st <= 0 ? 0 : std::min((int64_t){k}, "
              f"(L{last} - st + {dil - 1}) / {dil});",
              f"{ind}        float a = acc[j];"]
    if sched.vectorize and w["op"] == "avg":
        lines.append(f"{ind}        #pragma omp simd reduction(+:a)")
    lines += [f"{ind}        for (int64_t kl = klo; kl < khi; ++kl) {{ {cell} {_update(col, 'a')} }}",
              f"{ind}        acc[j] = a;",
              f"{ind}    }}",
              f"{ind}}}"]
    for depth in range(depth - 1, 1, -1):
        lines.append("    " * depth + "}")
    div = ""
    if w["op"] == "avg" and w["divisor"] is None:
        outer = " * ".join([_divisor_factor(col, i, f"o{i}", "int64_t") for i in range(last)] or ["(int64_t)1"])
        lines.append(f"        const int64_t dvo = {outer};")
        div = f"dvo * {_divisor_factor(col, last, 'j0 + j', 'int64_t')}"
    value = _finish(col, "acc[j]", div)
    lines += [f"        for (int64_t j = 0; j < n; ++j) ob[j] = {c_post(col, value)};", "    }", "}"]
    return lines


def cpu_launch(col: ColOp, names: dict) -> list[str]:
    return launch_lines(col, names, f"self.kf_lib.{col.kname}(xc, out, {row_args(col)}B, *L, *O)")


# ----------------------------------------------------------------------------------------------- CUDA

def cuda_pool(col: ColOp) -> list[str]:
    w, d = col.pool, _dims(col)
    ll = "long long"
    total = " * ".join(["B"] + [f"O{i}" for i in range(d)])
    lines = [_header(col, "a thread an output element, its window read in place"),
             f'extern "C" __global__ void {col.kname}(const float* __restrict__ x, float* __restrict__ out, '
             f"{_params(col, ll, ' __restrict__')}) {{",
             f"    const {ll} total = {total};",
             f"    for ({ll} t = blockIdx.x * ({ll})blockDim.x + threadIdx.x; t < total; "
             f"t += ({ll})gridDim.x * blockDim.x) {{",
             f"        {ll} q = t;"]
    for i in reversed(range(d)):
        lines.append(f"        const {ll} o{i} = q % O{i}; q /= O{i};")
    lines += ["        const float* xb = x + q * (" + " * ".join(f"L{i}" for i in range(d)) + ");",
              f"        float acc = {_init(col)};"]
    lines += c_row_loads(col, "q", "        ")
    depth, base = 2, "xb"
    for i in range(d):
        ind = "    " * depth
        inner = " * ".join(f"L{j}" for j in range(i + 1, d)) or "1"
        lines += [f"{ind}#pragma unroll",
                  f"{ind}for (int k{i} = 0; k{i} < {w['k'][i]}; ++k{i}) {{",
                  f"{ind}    const {ll} i{i} = {_cell(col, i)};",
                  f"{ind}    if (i{i} < 0 || i{i} >= L{i}) continue;",
                  f"{ind}    const float* x{i} = {base} + i{i} * ({inner});"]
        base, depth = f"x{i}", depth + 1
    ind = "    " * depth
    lines.append(f"{ind}const float v = {c_read(col, f'__ldg({base})')}; {_update(col, 'acc')}")
    for depth in range(depth - 1, 1, -1):
        lines.append("    " * depth + "}")
    div = " * ".join(_divisor_factor(col, i, f"o{i}", ll) for i in range(d))
    lines += [f"        out[t] = {c_post(col, _finish(col, 'acc', div))};", "    }", "}"]
    return lines


def cuda_launch(col: ColOp, names: dict) -> list[str]:
    return launch_lines(col, names, f"self.kf_mod.{col.kname}(grid=(max(1, min((out.numel() + 255) // 256, "
                                    "self.kf_sms * 32)),), block=(256,), "
                                    f"args=(xc, out, {row_args(col)}B, *L, *O))")


# ----------------------------------------------------------------------------------------------- Triton

def triton_pool(col: ColOp) -> list[str]:
    w, d = col.pool, _dims(col)
    params = ", ".join([f"a{i}" for i in range(len(col.aux))] + ["B"] + [f"L{i}" for i in range(d)]
                       + [f"O{i}" for i in range(d)])
    lines = ["@triton.jit",
             f"def {col.kname}(x, out, N, {params}, BLOCK: tl.constexpr):",
             "    " + _header(col, "a program BLOCK output elements, each window unrolled").replace("//", "#", 1),
             "    t = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
             "    mask = t < N",
             "    q = t"]
    for i in reversed(range(d)):
        lines += [f"    o{i} = q % O{i}", f"    q = q // O{i}"]
    init = "-float('inf')" if w["op"] == "max" else "0.0"
    # int64 index arithmetic throughout: each product starts from an int64 block (scalar sizes may be int32)
    lines += ["    xb = x + q" + "".join(f" * L{i}" for i in range(d)),
              f"    acc = tl.full([BLOCK], {init}, tl.float32)"]
    rows = row_values(col)
    lines += [f"    {v} = tl.load(a{i} + q, mask=mask, other=0.0)" for i, v in enumerate(rows.values())]
    depth, ok, base = 1, "mask", "xb"
    for i in range(d):
        ind = "    " * depth
        inner = "".join(f" * L{j}" for j in range(i + 1, d))
        lines += [f"{ind}for k{i} in tl.static_range({w['k'][i]}):", f"{ind}    i{i} = {_cell(col, i)}",
                  f"{ind}    ok{i} = {ok} & (i{i} >= 0) & (i{i} < L{i})", f"{ind}    x{i} = {base} + i{i}{inner}"]
        ok, base, depth = f"ok{i}", f"x{i}", depth + 1
    ind = "    " * depth
    lines.append(f"{ind}u = tl.load({base}, mask={ok}, other=0.0)")
    lines += [ind + line for line in triton_chain(col.pre, "u", "v", "pre", rows)]
    if w["op"] == "max":
        lines.append(f"{ind}acc = tl.where({ok} & ((v > acc) | (v != v)), v, acc)")
    else:
        lines.append(f"{ind}acc += tl.where({ok}, v, 0.0)")
    if w["op"] == "max":
        lines.append("    r = acc")
    elif w["divisor"] is not None:
        lines.append(f"    r = acc / {float(w['divisor'])}")
    else:
        div = " * ".join(_triton_factor(col, i) for i in range(d))
        lines.append(f"    r = acc / ({div}).to(tl.float32)")
    lines += ["    " + line for line in triton_chain(col.post, "r", "y", "post", rows)]
    lines.append("    tl.store(out + t, y, mask=mask)")
    return lines


def _triton_factor(col: ColOp, i: int) -> str:
    w = col.pool
    k, s, p = w["k"][i], w["s"][i], w["p"][i]
    start = f"(o{i} * {s} - {p})"
    if w["include_pad"]:
        return f"(tl.minimum({start} + {k}, L{i} + {p}) - {start})"
    return f"(tl.minimum({start} + {k}, L{i}) - tl.maximum({start}, 0))"


def triton_launch(col: ColOp, names: dict) -> list[str]:
    grid = f"(max(1, triton.cdiv(out.numel(), {TRITON_BLOCK})),)"
    return launch_lines(col, names, f"{col.kname}[{grid}](xc, out, out.numel(), {row_args(col)}B, *L, *O, "
                                    f"BLOCK={TRITON_BLOCK})")


# ----------------------------------------------------------------------------------------------- launch

def launch_lines(col: ColOp, names: dict, call: str) -> list[str]:
    """The launch of one window kernel: the input as the kernel reads it, its chains' row values, the output
    allocated, the call."""
    w = col.pool
    args = ", ".join(repr(tuple(w[key])) for key in ("k", "s", "p", "dil"))
    d = len(w["k"])
    return [f"# {col.kname}: {col.label} (window kernel)",
            f"xc, B, L, O = kf_pool_view({names[col.x]}, {args}, {w['ceil']})",
            *row_arrays(col, names, "xc", str(d)),
            "out = torch.empty(tuple(xc.shape[:xc.dim() - len(L)]) + O, dtype=torch.float32, device=xc.device)",
            "if out.numel():",
            *["    " + line for line in call.split("\n")],
            f"{names[col.name]} = out"]
