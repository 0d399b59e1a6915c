"""The Python launch lines of the CUDA writer's kernels (threads, grid, block shape chosen at run time from the row
length) and the sizes the kernel text and the launch must agree on."""

from __future__ import annotations

from .. import emit
from .rowcache import RowCache
from .pipeline import pipeline_launch
from .rowcopy import ELEM_BYTES
from ...plan.plans import KernelPlan
from ...schedule import Schedule


def cuda_threads(plan: KernelPlan, sched: Schedule, cache: RowCache) -> int:
    """Threads per block: for row kernels under `block_shape` at most the row cache's block limit (the run-time size
    is smaller for short rows); for elementwise kernels 64 under `unroll` (4 vectors in flight per thread and
    operand: one batch covers a 1024-element chunk, and 32 such blocks fill an SM), else 256."""
    if plan.npasses:
        return cache.block_limit if sched.block else 256
    return 64 if batched(sched) else 256


def cuda_chunk(plan: KernelPlan, sched: Schedule) -> int:
    """Columns per elementwise task: one batch of the block (64 threads x UNROLL float4s) under `unroll`, four when
    each task first reads per-row values (a normalization's statistics, per-channel parameters). Measured on an H200
    (kernel time): relu over 16384x32768 fp32, 64 threads with 1024-element chunks 1.011 ms, as fast as eager and
    torch.compile (1.011), 256 threads with 8192-element chunks (four batches each) 1.056 ms; GroupNorm+SiLU's
    normalizing kernel (four per-row values, two of them through strided offsets, rows of 16384) took the forward
    from 1.81 to 1.63 ms with 4096-element chunks."""
    if batched(sched):
        return 64 * 4 * UNROLL * (4 if plan.row_slots else 1)
    return 8192 if sched.block else 1024


def batched(sched: Schedule) -> bool:
    return sched.block and sched.unroll and sched.vectorize


UNROLL = 4  # vectors loaded per operand, back to back, before any is used (the `unroll` move's vector path)


def cuda_launch_lines(plan: KernelPlan, names: dict, sched: Schedule, signature, cache: RowCache) -> emit.Launch:
    """`signature(plan)`: the kernel's [(declaration, role)], in parameter order; `cache`: the kernel's
    `row_cache`, as its text was written with."""
    if plan.pipeline:
        return pipeline_launch(plan, names, signature)
    lines, outs, args = emit.prep_lines(plan, names)
    call = [args[role] for _, role in signature(plan)]
    threads = cuda_threads(plan, sched, cache)
    if plan.npasses == 0:
        chunk = cuda_chunk(plan, sched)
        # x: a power of two covering the row in float4s (at least a warp), or in batches of UNROLL float4s under
        # `unroll` (a 128-wide row: 8 threads, each with 4 float4s in flight); y: rows sharing the block
        per, least = (4 * UNROLL, 4) if (sched.unroll and sched.vectorize) else (4, 32)
        lines.append(f"tx = min({threads}, max({least}, 1 << max(0, (cols + {per - 1}) // {per} - 1).bit_length()))")
        lines.append(f"ty = {threads} // tx")
        lines.append(f"tasks = ((rows + ty - 1) // ty) * ((cols + {chunk - 1}) // {chunk})")
        # rows of at least a chunk: one block per task (the block scheduler streams them, measured 3-6 % faster on an
        # H200 than a grid-stride loop); short rows: a grid-stride loop, which keeps each block's row setup warm
        lines.append(f"grid = max(1, min(tasks, {2**31 - 1} if cols >= {chunk} else self.kf_sms * {4096 // threads}))")
        block = "(tx, ty)"
    elif sched.parallel or sched.warp_reduce:
        lines.append(f"threads = min({threads}, max(32, 1 << max(0, cols // {cache.elems_per_thread} - 1)"
                     ".bit_length()))")
        if cache.copy:
            # 1024 threads and a row that fits the cache and the shared memory: the kernel copies each next row
            # (`cuda_rowcopy`), one block an SM walking its rows
            nbytes = ELEM_BYTES[plan.slots[cache.slots[0]].ctype]
            lines.append(f"smem = cols * {nbytes} if threads == 1024 and cols % 4 == 0 and cols * {nbytes} % 16 == 0 "
                         f"and cols <= {4 * cache.k} * threads and cols * {nbytes} <= self.kf_copy_smem else 0")
            lines.append("grid = max(1, min(rows, self.kf_sms if smem else self.kf_sms * (2048 // threads) * 2))")
        else:
            lines.append("grid = max(1, min(rows, self.kf_sms * (2048 // threads) * 2))")
        block = "(threads,)"
    else:
        lines.append(f"grid = max(1, (rows + {threads - 1}) // {threads})")
        block = f"({threads},)"
    smem = ", shared_mem=smem" if cache.copy else ""
    call_line = f"self.kf_mod.{plan.name}(grid=(grid,), block={block}, args=({', '.join(call)},){smem})"
    return emit.Launch(lines, outs, [call_line])
