"""CUDA C++ candidate writer, compiled through NVRTC (`platforms.cuda.compile_cuda`).

Same kernel plans as the CPU writer (row space, element- and row-level values, reduction passes); the schedule knobs
mean: elementwise kernels run (row, chunk) tasks, one thread block per task on rows of at least a chunk and over a
grid-stride loop on shorter ones. Row kernels start with one thread per row; `parallelize_rows` gives each row a
thread block (block-wide reductions through shared memory); `warp_reduce` reduces with warp shuffles first;
`vectorize` uses 4-element loads/stores (float4; 8 bytes of bf16/fp16 widened to a float4; 4 bools) on rows whose
pointers are aligned for them and whose length is a multiple of 4, a `cat` reading its pieces lane by lane;
`block_shape` gives elementwise threads 8 float4s per task and row kernels up to 1024 threads (512 when the cache
holds several operands: `cuda_rowcache`) plus a register cache of the row (read from memory once, however many
passes; up to 16 elements a thread, 32 with one cached operand of longer rows; bf16/fp16 kept packed, twice as deep
when all are; a kernel that may run 1024-thread blocks of it, alone on their SM, starts its odd blocks a little late
so SMs do not read and write in lockstep, and one caching a single operand of dense rows copies each next row into
shared memory meanwhile on sm_90+: `cuda_rowcopy`; and GroupNorm's statistics folded into its elementwise kernel:
`cuda_pipeline`, through `refine`); `unroll` adds `#pragma unroll 4` and makes elementwise threads
load 4 vectors per operand before computing any. A strided operand's row offset comes from the pair (n, s) the host
works out per layout (`kf_fast`, passed after the strides in meta): (r % n) * s, so a row costs at most one
division. Blocks are sized to the row at run time: short rows share a block (2-D blocks, one row per y), row kernels
get about 16 elements a thread, so neither leaves most of a block idle. Kernel pointers are `__restrict__` (every
output is a fresh tensor); bf16/fp16 rounding uses the hardware `cvt` on sm_80+.

The statement writer (`CudaEmitter`, in `cuda_emitter`) is shared with the Metal writer.
"""

from __future__ import annotations

from .. import emit
from .. import Backend
from ..cpu import signature as cpu_signature
from .emitter import IDENT, CudaEmitter
from .launch import UNROLL, batched, cuda_chunk, cuda_launch_lines
from .pipeline import CUDA_PIPE, pipeline_kernel, pipelined
from .prelude import CUDA_HALF_BITS, CUDA_HALF_VEC, CUDA_L2_KEEP, CUDA_PRELUDE
from .rowcache import PACKED, VTYPE, RowCache, row_cache
from .rowcopy import CUDA_ROWCOPY, cache_loads, copy_load, copy_setup
from ..cexprs import half_math, row_program, store
from ...plan.plans import KernelPlan
from ...schedule import Schedule

_OPS = {"sum": 0, "mean": 0, "max": 1, "min": 2}


def _cuda_signature(plan: KernelPlan) -> list[tuple[str, str]]:
    out = []
    for decl, role in cpu_signature(plan, Schedule()):
        decl = decl.replace("int64_t", "long long").replace("uint16_t", "unsigned short")
        # every output is a fresh tensor, so no pointer aliases one that is written: loads may be reordered past
        # stores and take the read-only path
        out.append((decl.replace("* ", "* __restrict__ "), role))
    return out


def cuda_kernel(plan: KernelPlan, sched: Schedule, cache: RowCache) -> str:
    """The kernel's text; `cache` is `row_cache(plan, sched)`, which its launch reads too."""
    params = ", ".join(d for d, _ in _cuda_signature(plan))
    if plan.pipeline:
        return pipeline_kernel(plan, sched, params, _cuda_loop)
    e = CudaEmitter(plan, sched)
    prog = row_program(plan, cache_rows=False)
    unroll = "#pragma unroll 4" if sched.unroll else None
    e.w(0, f"// {plan.label}")
    # block-per-row kernels launch up to the row cache's block limit: the bound caps registers so such a launch always
    # fits. Batched elementwise kernels launch 64: at least 10 blocks an SM (96 registers a thread) keep enough loads
    # in flight (rotary embedding, 3 operands and a cat: 109 registers, 25 % occupancy, 69 % of the measured
    # bandwidth on an H200; 96 registers: 74 %; capping at 64 or 80 spills and costs more)
    bounds = ""
    if plan.npasses and (sched.parallel or sched.warp_reduce):
        bounds = f"__launch_bounds__({cache.block_limit}) "
    elif not plan.npasses and batched(sched):
        bounds = "__launch_bounds__(64, 10) "
    e.w(0, f'extern "C" __global__ void {bounds}{plan.name}({params}) {{')
    e.offset_setup(1)
    if plan.npasses == 0:
        # tasks are (group of blockDim.y rows, chunk of columns); threadIdx.y picks the row, so short rows fill a block
        e.w(1, f"const long long CH = {cuda_chunk(plan, sched)};")
        e.w(1, "const long long nch = (cols + CH - 1) / CH;")
        e.w(1, "const long long ntask = ((rows + blockDim.y - 1) / blockDim.y) * nch;")
        e.w(1, "for (long long t = blockIdx.x; t < ntask; t += gridDim.x) {")
        e.w(2, "const long long rt = nch == 1 ? t : t / nch;  // short rows: no 64-bit division")
        e.w(2, "const long long r = rt * blockDim.y + threadIdx.y;")
        e.w(2, "const long long c0 = (t - rt * nch) * CH;")
        e.w(2, "const long long c1 = min(cols, c0 + CH);")
        e.w(2, "if (r < rows) {")
        e.row_setup(3)
        e.row_nodes(3, prog.row_nodes_by_pass.get(0, []))
        for loop in prog.loops:
            _cuda_loop(e, 3, loop, "c0", "c1", unroll, batch=True)
        if any(o.level == "R" for o in plan.outputs):
            e.w(3, "if (c0 == 0 && threadIdx.x == 0) {")
            for j, o in enumerate(plan.outputs):
                if o.level == "R":
                    e.w(4, f"o{j}[r] = {store(o.dtype, e.var(o.node))};")
            e.w(3, "}")
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
                    # a sequential sum over a long row drifts past fp32 tolerance (32768 terms: ~1e-3); a double
                    # accumulator keeps this plain version correct, the block reductions split the row instead
                    acc_t = "double" if op in ("sum", "mean") else "float"
                    e.w(1, f"{acc_t} acc_{r} = {IDENT[op]};")
            if unroll:
                e.w(1, unroll)
            e.w(1, "for (long long c = 0; c < cols; ++c) {")
            e.body(2, loop)
            e.w(1, "}")
            if loop.kind == "pass":
                for r in loop.reds:
                    div = " / (double)cols" if e.by[r].red["op"] == "mean" else ""
                    e.w(1, f"const float {e.var(r)} = (float)(acc_{r}{div});")
                e.row_nodes(1, prog.row_nodes_by_pass.get(loop.index, []))
        for j, o in enumerate(plan.outputs):
            if o.level == "R":
                e.w(1, f"o{j}[r] = {store(o.dtype, e.var(o.node))};")
    else:
        # one thread block per row
        # the warp path keeps one value per warp; the tree path one per thread
        size = 32 if sched.warp_reduce else 1024
        e.w(1, f"__shared__ float kf_sh[{size}];")
        e.w(1, f"__shared__ double kf_shd[{size}];")
        cached, k = cache.slots, cache.k
        if cache.copy:
            copy_setup(e, plan, cache, _row_slots(prog))
        if cached and cache.block_limit == 1024:
            _stagger(e, k, cache.copy)
        e.w(1, "for (long long r = blockIdx.x; r < rows; r += gridDim.x) {")
        e.row_setup(2)
        e.row_nodes(2, prog.row_nodes_by_pass.get(0, []))
        if cached:
            conds = ["(cols & 3) == 0", f"cols <= {4 * k} * (long long)blockDim.x"]
            conds += [e.aligned(f"p{si}", plan.slots[si].ctype) for si in _row_slots(prog)]
            conds += [e.aligned(f"q{j}", plan.outputs[j].dtype) for j in sorted({j for lp in prog.loops
                                                                                 for j in lp.outputs})]
            cond = " && ".join(conds)
            e.w(2, f"if (kf_tma || ({cond})) {{" if cache.copy else f"if ({cond}) {{")
            e.w(3, "// the row is read from memory once, into registers; every pass reads the registers")
            for si in cached:
                e.w(3, f"{PACKED.get(plan.slots[si].ctype, 'float4')} C{si}[{k}];")
            if cache.copy:
                copy_load(e, plan, cache, 3)
            else:
                cache_loads(e, 3, cache, lambda si, c4: e.vload(si, c4, packed=plan.slots[si].ctype in PACKED))
            _row_passes(e, 3, prog, lambda d, loop: _cached_loop(e, d, loop, cache), sum_t="float")
            _row_outputs(e, 3)  # row values live inside each branch
            e.w(2, "} else {")
            _row_passes(e, 3, prog, lambda d, loop: _cuda_loop(e, d, loop, "0", "cols", unroll))
            _row_outputs(e, 3)
            e.w(2, "}")
        else:
            _row_passes(e, 2, prog, lambda d, loop: _cuda_loop(e, d, loop, "0", "cols", unroll))
            _row_outputs(e, 2)
        e.w(1, "}")
    e.w(0, "}")
    return "\n".join(e.lines) + "\n"


def _stagger(e: CudaEmitter, k: int, copy: bool) -> None:
    """Odd blocks start a little late when a block of 1024 threads holds whole rows in registers, alone on its SM.

    Such blocks otherwise move through their rows in lockstep, so every SM reads its rows, then every SM writes its
    results, at the same time. Log-softmax over 32768-wide rows ran at 71 % of the measured bandwidth on an H200;
    with odd blocks delayed by about the time an SM takes to read half a row (cols / 16 ns) it ran at 77 % (kernel
    1.425 -> 1.303 ms), as softmax already did (its exps space out the stores). Softmax, standardize and LayerNorm
    were unchanged (within 0.5 %). The delay is paid once a block, so only launches of several rows a block get it;
    a kernel copying its next row (`copy`: `kf_tma`) needs none (the copies keep every SM reading).
    """
    e.w(1, "#if __CUDA_ARCH__ >= 700")
    e.w(1, f"if ({'!kf_tma && ' if copy else ''}(blockIdx.x & 1) && blockDim.x == 1024 && cols <= {4 * k} * "
           "(long long)blockDim.x && rows >= 4 * (long long)gridDim.x) {")
    e.w(2, "__nanosleep((unsigned)min(cols / 16, 8192ll));")
    e.w(1, "}")
    e.w(1, "#endif")


def _row_passes(e: CudaEmitter, d: int, prog, loop_writer, sum_t: str = "double") -> None:
    """The passes of a block-per-row kernel: per pass, thread-local accumulators, the loop, a block reduction.

    Sums are reduced across the block in double: a float sum of a 32768-element row can differ from PyTorch's by
    more than the fp32 tolerance on some rows, a double one only by PyTorch's own rounding. Each thread's own
    partial sum is a `sum_t`: float over the at most 32 elements a thread holds in the register row cache (a
    float-to-double conversion and double add per element cost up to 18 % on an H200: logsumexp 1.30 -> 1.07 ms),
    double when a thread streams a long row. Streaming a row, a variance's pass is folded into its mean's (see
    `_variance_passes`)."""
    warp = "true" if e.sched.warp_reduce else "false"
    folded = _variance_passes(e, prog) if sum_t == "double" else {}
    squares = {m: r2 for m, r2 in folded.values()}
    for loop in prog.loops:
        if loop.index in folded:
            continue  # computed with the previous pass
        if loop.kind == "pass":
            for r in loop.reds + [squares[m] for m in loop.reds if m in squares]:
                op = e.by[r].red["op"]
                if op in ("sum", "mean"):
                    e.w(d, f"{sum_t} acc_{r} = 0;")
                else:
                    e.w(d, f"float acc_{r} = {IDENT[op]};")
            e.squares = squares
            loop_writer(d, loop)
            e.squares = {}
            for r in loop.reds:
                op = e.by[r].red["op"]
                if r in squares:
                    r2 = squares[r]
                    e.w(d, f"const double kf_m_{r} = kf_block_sum_d(acc_{r}, kf_shd, {warp}) / (double)cols;")
                    e.w(d, f"const double kf_q_{r2} = kf_block_sum_d(acc_{r2}, kf_shd, {warp});")
                    e.w(d, f"const float {e.var(r)} = (float)kf_m_{r};")
                    var = f"kf_q_{r2} / (double)cols - kf_m_{r} * kf_m_{r}" if e.by[r2].red["op"] == "mean" else \
                        f"kf_q_{r2} - kf_m_{r} * kf_m_{r} * (double)cols"
                    # rounding can leave a tiny negative; NaN (a row holding inf or NaN) stays NaN, as PyTorch's
                    e.w(d, f"const double kf_v_{r2} = {var};")
                    e.w(d, f"const float {e.var(r2)} = (float)(kf_v_{r2} < 0.0 ? 0.0 : kf_v_{r2});")
                elif op in ("sum", "mean"):
                    div = " / (double)cols" if op == "mean" else ""
                    e.w(d, f"const float {e.var(r)} = (float)(kf_block_sum_d(acc_{r}, kf_shd, {warp}){div});")
                else:
                    e.w(d, f"const float {e.var(r)} = kf_block_reduce(acc_{r}, {_OPS[op]}, kf_sh, {warp});")
            e.row_nodes(d, prog.row_nodes_by_pass.get(loop.index, []))
            if loop.index + 1 in folded:
                e.row_nodes(d, prog.row_nodes_by_pass.get(loop.index + 1, []))
        else:
            loop_writer(d, loop)


def _variance_passes(e: CudaEmitter, prog) -> dict[int, tuple[str, str]]:
    """Passes that only reduce squared deviations from the previous pass's mean: {pass: (mean, squares reduction)}.

    A pass of `sum/mean((u - mean(u))^2)` (LayerNorm's, GroupNorm's, var's and std's variance) reads the row again
    after its mean's pass. A thread streaming a long row can instead sum u and u^2 in one pass, in double, and take
    var = E[u^2] - E[u]^2: the cancellation loses about log10(mean^2 / var) of double's 16 digits, far inside the
    fp32 tolerance (a float sum would lose them from fp32's 7). GroupNorm (rows of 262144 on the gallery's sizes)
    reads its input twice instead of three times: 2.38 -> 1.71 ms on an H200. Rows held in the register cache
    keep the two passes (they cost no memory traffic there, and the per-thread sums are float)."""
    by = e.by
    out: dict[int, tuple[str, str]] = {}
    loops = {lp.index: lp for lp in prog.loops if lp.kind == "pass"}
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


def _row_outputs(e: CudaEmitter, d: int) -> None:
    if any(o.level == "R" for o in e.plan.outputs):
        e.w(d, "if (threadIdx.x == 0) {")
        for j, o in enumerate(e.plan.outputs):
            if o.level == "R":
                e.w(d + 1, f"o{j}[r] = {store(o.dtype, e.var(o.node))};")
        e.w(d, "}")


def _row_slots(prog) -> list[int]:
    return sorted({si for loop in prog.loops for si in loop.slots})


def _cached_loop(e: CudaEmitter, d: int, loop, cache: RowCache) -> None:
    """One pass over the row held in registers (C<slot>[k], k-th vector of this thread; bf16/fp16 widened here)."""
    e.w(d, "#pragma unroll")
    e.w(d, f"for (int k = 0; k < {cache.k}; ++k) {{")
    e.w(d + 1, "const long long c4 = threadIdx.x + k * (long long)blockDim.x;")
    e.w(d + 1, "if (c4 < cols / 4) {")

    def vector(si):
        if si not in cache.slots:
            return e.vload(si, "c4")
        return e.widen(si, f"C{si}[k]") if e.plan.slots[si].ctype in PACKED else f"C{si}[k]"

    e.vec4_body(d + 2, loop, vector)
    e.w(d + 1, "}")
    e.w(d, "}")


def _cuda_loop(e: CudaEmitter, d: int, loop, lo: str, hi: str, unroll: str | None, batch: bool = False,
               depth: int = UNROLL) -> None:
    """A block-stride loop over [lo, hi); with `vectorize`, a 4-element path when the row's pointers allow it.

    Reduction passes take the vector path too: one 4-byte load in flight per thread leaves a reduction at about
    half of the measured bandwidth on an H200 (57 % for a row max), 16-byte loads keep enough bytes in flight.
    With `batch` (elementwise kernels under `unroll`), the vector path loads `depth` vectors per operand before
    computing any, so each thread keeps that many loads in flight. Row kernels do not batch: their arrays would add
    to the register row cache's in one kernel capped at 64 registers a thread (1024-thread blocks), and the
    spills cost more than the batching gains (LayerNorm 1.12 -> 3.19 ms on an H200)."""
    cond = e.vec4_ok(loop) if e.sched.vectorize else ""
    if cond:
        e.w(d, f"if ({cond}) {{")
        if unroll and batch:
            e.w(d + 1, f"for (long long c4b = {lo} / 4 + threadIdx.x; c4b < {hi} / 4; "
                       f"c4b += {depth} * (long long)blockDim.x) {{")
            for si in loop.slots:
                e.w(d + 2, f"{VTYPE[e.plan.slots[si].ctype]} B{si}[{depth}];")
            for part in ("load", "compute"):
                e.w(d + 2, "#pragma unroll")
                e.w(d + 2, f"for (int u = 0; u < {depth}; ++u) {{")
                e.w(d + 3, "const long long c4 = c4b + u * (long long)blockDim.x;")
                e.w(d + 3, f"if (c4 < {hi} / 4) {{")
                if part == "load":
                    for si in loop.slots:
                        e.w(d + 4, f"B{si}[u] = {e.vload(si, 'c4')};")
                else:
                    e.vec4_body(d + 4, loop, lambda si: f"B{si}[u]")
                e.w(d + 3, "}")
                e.w(d + 2, "}")
            e.w(d + 1, "}")
        else:
            if unroll:
                e.w(d + 1, unroll)
            e.w(d + 1, f"for (long long c4 = {lo} / 4 + threadIdx.x; c4 < {hi} / 4; c4 += blockDim.x) {{")
            e.vec4_body(d + 2, loop, lambda si: e.vload(si, "c4"))
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


class CudaBackend(Backend):
    kind = "cuda-nvrtc"
    device_type = "cuda"
    fuses_cat = True
    half_dtypes = ("bfloat16", "float16")

    def refine(self, plan, sched):
        return pipelined(plan, sched)

    def program(self, plan, desc, sched, target, header, marker):
        # vectorized programs also take the fast exp (__expf, a few ulp: far inside the fp32 tolerance)
        fast = ["#define KF_FAST_MATH 1"] if sched.vectorize else []
        halves = half_math(plan.kernels, "__device__ __forceinline__", CUDA_HALF_BITS)
        halves += [CUDA_HALF_VEC.strip()] if halves else []
        caches = {k.name: row_cache(k, sched) for k in plan.kernels}  # each kernel's text and launch share it
        copies = [CUDA_ROWCOPY.strip()] if any(c.copy for c in caches.values()) else []
        kernels = [cuda_kernel(k, sched, caches[k.name]) for k in plan.kernels]
        keeps = [CUDA_L2_KEEP.strip()] if any("kf_keep_" in k for k in kernels) else []  # vector loads only
        pipes = [CUDA_PIPE.strip()] if any(k.pipeline for k in plan.kernels) else []
        src = "\n".join(fast + [CUDA_PRELUDE.strip()] + halves + copies + keeps + pipes + kernels)
        tail = ["self.kf_mod = compile_cuda(SOURCE)",
                "kf_props = torch.cuda.get_device_properties(torch.cuda.current_device())",
                "self.kf_sms = kf_props.multi_processor_count"]
        if copies:  # a row kernel may copy its next row into shared memory: sm_90+, within what a block may use
            tail += ["self.kf_copy_smem = (kf_props.shared_memory_per_block_optin - 4096 "
                     "if (kf_props.major, kf_props.minor) >= (9, 0) else 0)"]
        return emit.candidate(plan, desc, header=header, marker=marker,
                              imports=[f"from {target.module} import compile_cuda"], source_name="SOURCE",
                              source_text=src, init_tail=tail,
                              launch=lambda kp, names: cuda_launch_lines(kp, names, sched, _cuda_signature,
                                                                         caches[kp.name]))
