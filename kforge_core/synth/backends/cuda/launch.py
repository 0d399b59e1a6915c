"""The Python launch lines of the CUDA writer's kernels: grid and block shape chosen at run time from the row length,
within what the kernel's `KernelSchedule` says it was written for."""

from __future__ import annotations

from .. import emit
from .pipeline import pipeline_launch
from .rowcopy import ELEM_BYTES
from . import split
from .schedule import KernelSchedule
from ...plan.plans import KernelPlan


def cuda_launch_lines(plan: KernelPlan, names: dict, signature, ks: KernelSchedule) -> emit.Launch:
    """`signature(plan)`: the kernel's [(declaration, role)], in parameter order; `ks`: the kernel's schedule, as its
    text was written with."""
    if ks.shape == "pipelined":
        return pipeline_launch(plan, names, signature, ks)
    lines, outs, args = emit.prep_lines(plan, names)
    threads = ks.threads
    if ks.shape == "elementwise":
        chunk = ks.chunk
        # x: a power of two covering the row in float4s (at least a warp), or in batches of float4s when the kernel
        # batches its loads (a 128-wide row: 8 threads, each with 4 float4s in flight); y: rows sharing the block
        per, least = (4 * ks.batch, 4) if ks.batch else (4, 32)
        lines.append(f"tx = min({threads}, max({least}, 1 << max(0, (cols + {per - 1}) // {per} - 1).bit_length()))")
        lines.append(f"ty = {threads} // tx")
        lines.append(f"tasks = ((rows + ty - 1) // ty) * ((cols + {chunk - 1}) // {chunk})")
        # rows of at least a chunk: one block per task (the block scheduler streams them, faster than a grid-stride
        # loop); short rows: a grid-stride loop, which keeps each block's row setup warm
        lines.append(f"grid = max(1, min(tasks, {2**31 - 1} if cols >= {chunk} else self.kf_sms * {4096 // threads}))")
        block = "(tx, ty)"
    elif ks.shape == "block_rows":
        lines.append(f"threads = min({threads}, max(32, 1 << max(0, cols // {ks.elems_per_thread} - 1)"
                     ".bit_length()))")
        tasks = "rows"
        if ks.split:  # few long rows: several blocks a row (`split`)
            lines += split.launch_setup("threads")
            outs += split.launch_buffers(len(split.split_accumulators(plan)), "rows", f"a{plan.shape_slots[0]}.device")
            args = split.launch_args(args)
            tasks = "rows * kf_split"
        if ks.copy:
            # 1024 threads and a row that fits the cache and the shared memory: the kernel copies each next row
            # (`cuda_rowcopy`), one block an SM walking its rows
            nbytes = ELEM_BYTES[plan.slots[ks.cached[0]].ctype]
            whole = " and kf_split == 1" if ks.split else ""
            lines.append(f"smem = cols * {nbytes} if threads == 1024 and cols % 4 == 0 and cols * {nbytes} % 16 == 0 "
                         f"and cols <= {4 * ks.k} * threads and cols * {nbytes} <= self.kf_copy_smem{whole} else 0")
            lines.append(f"grid = max(1, min({tasks}, self.kf_sms if smem else self.kf_sms * (2048 // threads) * 2))")
        else:
            lines.append(f"grid = max(1, min({tasks}, self.kf_sms * (2048 // threads) * 2))")
        block = "(threads,)"
    else:
        lines.append(f"grid = max(1, (rows + {threads - 1}) // {threads})")
        block = f"({threads},)"
    call = [args[role] for _, role in signature(plan)]
    smem = ", shared_mem=smem" if ks.copy else ""
    call_line = f"self.kf_mod.{plan.name}(grid=(grid,), block={block}, args=({', '.join(call)},){smem})"
    return emit.Launch(lines, outs, [call_line])
