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
`cuda_pipeline`, through the plan rewrite `group_norm_pipeline`; the sizes each kernel gets: `schedule`); `unroll`
adds `#pragma unroll 4` and makes elementwise threads load 4 vectors per operand before computing any. A strided
operand's row offset comes from the pair (n, s) the host works out per layout (`kf_fast`, passed after the strides
in meta): (r % n) * s, so a row costs at most one division. Blocks are sized to the row at run time: short rows
share a block (2-D blocks, one row per y), row kernels get about 16 elements a thread, so neither leaves most of a
block idle. Kernel pointers are `__restrict__` (every output is a fresh tensor); bf16/fp16 rounding uses the
hardware `cvt` on sm_80+. A block-per-row kernel of one reduction pass and row outputs only may split each of a few
long rows over several blocks, decided at launch from the sizes (`split`: partials, the row's last block combines).

The statements come from the shared C-family writer (`cfamily`) in its CUDA dialect (`emitter.CudaWriter`).
"""

from __future__ import annotations

from .. import emit
from ..columns import cuda_launch, cuda_source
from ..base import Backend
from ..cpu import signature as cpu_signature
from .emitter import CudaWriter
from .launch import cuda_launch_lines
from .pipeline import CUDA_PIPE, pipeline_kernel
from .prelude import CUDA_HALF_BITS, CUDA_HALF_VEC, CUDA_L2_KEEP, CUDA_PRELUDE
from .rowcache import PACKED, VTYPE
from .rowcopy import CUDA_ROWCOPY, cache_loads, cache_loop, copy_load, copy_setup
from .schedule import KernelSchedule, kernel_schedule
from .split import CUDA_SPLIT, SPLIT_PARAMS, combine, split_accumulators, task_loop_head
from ..cexprs import half_math
from ...plan.passes import row_program
from ...plan.plans import KernelPlan
from ...schedule import Schedule

_OPS = {"sum": 0, "mean": 0, "max": 1, "min": 2}


def _cuda_signature(plan: KernelPlan, ks: KernelSchedule | None = None) -> list[tuple[str, str]]:
    """The kernel's [(declaration, role)]: the CPU kernel's, plus the split's when `ks` may split rows."""
    out = []
    for decl, role in cpu_signature(plan, Schedule()):
        decl = decl.replace("int64_t", "long long").replace("uint16_t", "unsigned short")
        # every output is a fresh tensor, so no pointer aliases one that is written: loads may be reordered past
        # stores and take the read-only path
        out.append((decl.replace("* ", "* __restrict__ "), role))
    return out + (SPLIT_PARAMS if ks is not None and ks.split else [])


def cuda_kernel(plan: KernelPlan, sched: Schedule, ks: KernelSchedule) -> str:
    """The kernel's text; `ks` is `kernel_schedule(plan, sched)`, which its launch reads too."""
    params = ", ".join(d for d, _ in _cuda_signature(plan, ks))
    if ks.shape == "pipelined":
        return pipeline_kernel(plan, sched, ks, params, _cuda_loop)
    e = CudaWriter(plan, sched)
    prog = row_program(plan, cache_rows=False)
    unroll = "#pragma unroll 4" if sched.unroll else None
    e.w(0, f"// {plan.label}")
    e.w(0, f'extern "C" __global__ void {ks.bounds_text}{plan.name}({params}) {{')
    e.offset_setup(1)
    if ks.shape == "elementwise":
        # tasks are (group of blockDim.y rows, chunk of columns); threadIdx.y picks the row, so short rows fill a block
        e.w(1, f"const long long CH = {ks.chunk};")
        e.w(1, "const long long nch = (cols + CH - 1) / CH;")
        e.w(1, "const long long ntask = ((rows + blockDim.y - 1) / blockDim.y) * nch;")
        e.w(1, "for (long long t = blockIdx.x; t < ntask; t += gridDim.x) {")
        e.w(2, "const long long rt = nch == 1 ? t : t / nch;  // short rows: no 64-bit division")
        e.w(2, "const long long r = rt * blockDim.y + threadIdx.y;")
        e.w(2, "const long long c0 = (t - rt * nch) * CH;")
        e.w(2, "const long long c1 = min(cols, c0 + CH);")
        e.w(2, "if (r < rows) {")
        e.row_begin(3, prog)
        for loop in prog.loops:
            _cuda_loop(e, 3, loop, "c0", "c1", unroll, depth=ks.batch)
        e.guarded_row_outputs(3, "c0 == 0 && threadIdx.x == 0")
        e.w(2, "}")
        e.w(1, "}")
    elif ks.shape == "thread_rows":
        e.w(1, "const long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x;")
        e.w(1, "if (r >= rows) return;")
        e.row_begin(1, prog)
        e.serial_row(1, prog)  # a double sum (the dialect's): the block reductions split the row instead
    else:
        # one thread block per row
        # the warp path keeps one value per warp; the tree path one per thread
        size = 32 if sched.warp_reduce else 1024
        e.w(1, f"__shared__ float kf_sh[{size}];")
        e.w(1, f"__shared__ double kf_shd[{size}];")
        cached, k = ks.cached, ks.k
        if ks.copy:
            copy_setup(e, plan, ks, _row_slots(prog))
        if ks.stagger:
            _stagger(e, k, ks.copy)
        if ks.split:
            task_loop_head(e, 1)  # a few long rows: several blocks a row (`split`)
        else:
            e.w(1, "for (long long r = blockIdx.x; r < rows; r += gridDim.x) {")
        e.row_begin(2, prog)
        # a split task streams its segment: the register cache holds whole rows
        lo, hi = ("kf_lo", "kf_hi") if ks.split else ("0", "cols")
        combine_at = (lambda d, loop, warp: combine(e, d, split_accumulators(e.plan, loop), warp)) if ks.split else None
        if cached:
            conds = (["kf_split == 1"] if ks.split else []) + ["(cols & 3) == 0",
                                                               f"cols <= {4 * k} * (long long)blockDim.x"]
            conds += [e.aligned(f"p{si}", plan.slots[si].ctype) for si in _row_slots(prog)]
            conds += [e.aligned(f"q{j}", plan.outputs[j].dtype) for j in sorted({j for lp in prog.loops
                                                                                 for j in lp.outputs})]
            cond = " && ".join(conds)
            e.w(2, f"if (kf_tma || ({cond})) {{" if ks.copy else f"if ({cond}) {{")
            e.w(3, "// the row is read from memory once, into registers; every pass reads the registers")
            for si in cached:
                e.w(3, f"{PACKED.get(plan.slots[si].ctype, 'float4')} C{si}[{k}];")
            if ks.copy:
                copy_load(e, plan, ks, 3)
            else:
                cache_loads(e, 3, ks, lambda si, c4: e.vload(si, c4, packed=plan.slots[si].ctype in PACKED))
            _row_passes(e, 3, prog, lambda d, loop: _cached_loop(e, d, loop, ks), sum_t="float")
            e.guarded_row_outputs(3, "threadIdx.x == 0")  # row values live inside each branch
            e.w(2, "} else {")
            _row_passes(e, 3, prog, lambda d, loop: _cuda_loop(e, d, loop, lo, hi, unroll), combine_at=combine_at)
            e.guarded_row_outputs(3, "threadIdx.x == 0")
            e.w(2, "}")
        else:
            _row_passes(e, 2, prog, lambda d, loop: _cuda_loop(e, d, loop, lo, hi, unroll), combine_at=combine_at)
            e.guarded_row_outputs(2, "threadIdx.x == 0")
        e.w(1, "}")
    e.w(0, "}")
    return e.text()


def _stagger(e: CudaWriter, k: int, copy: bool) -> None:
    """Odd blocks start a little late when a block of 1024 threads holds whole rows in registers, alone on its SM.

    Such blocks otherwise move through their rows in lockstep, so every SM reads its rows, then every SM writes its
    results, at the same time. Odd blocks are delayed by about the time an SM takes to read half a row (cols / 16 ns),
    which spaces the reads and writes out as softmax's exps already do (docs/PERF_NOTES.md). The delay is paid once
    a block, so only launches of several rows a block get it;
    a kernel copying its next row (`copy`: `kf_tma`) needs none (the copies keep every SM reading).
    """
    e.w(1, "#if __CUDA_ARCH__ >= 700")
    e.w(1, f"if ({'!kf_tma && ' if copy else ''}(blockIdx.x & 1) && blockDim.x == 1024 && cols <= {4 * k} * "
           "(long long)blockDim.x && rows >= 4 * (long long)gridDim.x) {")
    e.w(2, "__nanosleep((unsigned)min(cols / 16, 8192ll));")
    e.w(1, "}")
    e.w(1, "#endif")


def _row_passes(e: CudaWriter, d: int, prog, loop_writer, sum_t: str = "double", combine_at=None) -> None:
    """The passes of a block-per-row kernel: per pass, thread-local accumulators, the loop, a block reduction.

    Sums are reduced across the block in double: a float sum of a 32768-element row can differ from PyTorch's by
    more than the fp32 tolerance on some rows, a double one only by PyTorch's own rounding. Each thread's own
    partial sum is a `sum_t`: float over the at most 32 elements a thread holds in the register row cache (a
    float-to-double conversion and double add per element costs measurable time there: docs/PERF_NOTES.md),
    double when a thread streams a long row. Streaming a row, a variance's pass is folded into its mean's where the
    plan rewrite `variance_fold` marked it (`plan.variance_folds`; rows held in the register cache keep the two
    passes: they cost no memory traffic there, and the per-thread sums are float). `combine_at(d, loop, warp)`
    writes a split row's combine after its pass's loop (`split.combine`)."""
    warp = "true" if e.sched.warp_reduce else "false"
    folded = e.plan.variance_folds if sum_t == "double" else {}
    squares = {m: r2 for m, r2 in folded.values()}
    for loop in prog.loops:
        if loop.index in folded:
            continue  # computed with the previous pass
        if loop.kind == "pass":
            e.acc_init(d, loop.reds + [squares[m] for m in loop.reds if m in squares], sum_t=sum_t, zero="0")
            e.squares = squares
            loop_writer(d, loop)
            e.squares = {}
            if combine_at is not None:
                combine_at(d, loop, warp)
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


def _row_slots(prog) -> list[int]:
    return sorted({si for loop in prog.loops for si in loop.slots})


def _cached_loop(e: CudaWriter, d: int, loop, ks: KernelSchedule) -> None:
    """One pass over the row held in registers (C<slot>[k], k-th vector of this thread; bf16/fp16 widened here)."""

    def vector(si):
        if si not in ks.cached:
            return e.vload(si, "c4")
        return e.widen(si, f"C{si}[k]") if e.plan.slots[si].ctype in PACKED else f"C{si}[k]"

    cache_loop(e, d, ks, lambda dd: e.vec4_body(dd, loop, vector))


def _cuda_loop(e: CudaWriter, d: int, loop, lo: str, hi: str, unroll: str | None, depth: int = 0) -> None:
    """A block-stride loop over [lo, hi); with `vectorize`, a 4-element path when the row's pointers allow it.

    Reduction passes take the vector path too: one 4-byte load in flight per thread leaves a reduction at about
    half of the measured bandwidth, 16-byte loads keep enough bytes in flight.
    With a `depth` (elementwise kernels under `unroll`: the schedule's `batch`), the vector path loads `depth`
    vectors per operand before computing any, so each thread keeps that many loads in flight. Row kernels do not
    batch: their arrays would add to the register row cache's in one kernel capped at 64 registers a thread
    (1024-thread blocks), and the spills cost more than the batching gains (docs/PERF_NOTES.md)."""
    cond = e.vec4_ok(loop) if e.sched.vectorize else ""
    if cond:
        e.w(d, f"if ({cond}) {{")
        if unroll and depth:
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
    column_kernels = True

    def rewrites(self, sched):
        # the GroupNorm pipeline is written with the vector loads and the block shape's batching
        return (("group_norm_pipeline",) if sched.block and sched.vectorize else ()) + ("variance_fold",)

    def program(self, plan, desc, sched, target, header, marker):
        # vectorized programs also take the fast exp (__expf, a few ulp: far inside the fp32 tolerance)
        fast = ["#define KF_FAST_MATH 1"] if sched.vectorize else []
        halves = half_math(plan.kernels, "__device__ __forceinline__", CUDA_HALF_BITS)
        halves += [CUDA_HALF_VEC.strip()] if halves else []
        scheds = {k.name: kernel_schedule(k, sched) for k in plan.kernels}  # each kernel's text and launch read it
        copies = [CUDA_ROWCOPY.strip()] if any(s.copy for s in scheds.values()) else []
        kernels = [cuda_kernel(k, sched, scheds[k.name]) for k in plan.kernels]
        keeps = [CUDA_L2_KEEP.strip()] if any("kf_keep_" in k for k in kernels) else []  # vector loads only
        pipes = [CUDA_PIPE.strip()] if any(k.pipeline for k in plan.kernels) else []
        splits = [CUDA_SPLIT.strip()] if (any(s.split for s in scheds.values())
                                          or any(c.kind == "bnstats" for c in plan.columns)) else []
        src = "\n".join(fast + [CUDA_PRELUDE.strip()] + halves + copies + keeps + pipes + splits + kernels) + (
            "\n" + cuda_source(plan.columns) if plan.columns else "")
        tail = ["self.kf_mod = compile_cuda(SOURCE)",
                "kf_props = torch.cuda.get_device_properties(torch.cuda.current_device())",
                "self.kf_sms = kf_props.multi_processor_count"]
        if copies:  # a row kernel may copy its next row into shared memory: sm_90+, within what a block may use
            tail += ["self.kf_copy_smem = (kf_props.shared_memory_per_block_optin - 4096 "
                     "if (kf_props.major, kf_props.minor) >= (9, 0) else 0)"]
        return emit.candidate(plan, desc, header=header, marker=marker,
                              imports=[f"from {target.module} import compile_cuda"], source_name="SOURCE",
                              source_text=src, init_tail=tail,
                              launch=lambda kp, names: cuda_launch_lines(
                                  kp, names, lambda p: _cuda_signature(p, scheds[p.name]), scheds[kp.name]),
                              columns=cuda_launch)
