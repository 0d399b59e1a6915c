"""One CUDA kernel's schedule: every decision its text and its launch must agree on (block shape, threads, launch
bounds, task size, vectors in flight, the register row cache and its copy, the pipelined look-ahead), made once a
kernel by `kernel_schedule` and read by both, so neither re-derives what the other chose."""

from __future__ import annotations

from dataclasses import dataclass

from .rowcache import ROW_CACHE_K, row_cache
from .split import row_splittable
from ...plan.plans import KernelPlan
from ...schedule import Schedule

UNROLL = 4  # vectors loaded per operand, back to back, before any is used (the `unroll` move's vector path)

# GroupNorm's pipelined kernel (`pipeline`, where the measurements behind these are): threads a block, blocks an SM
# (the launch bound caps registers at 64 a thread; the grid launches that many), elements a task (statistics and
# elementwise alike: DEPTH float4 batches of the block), float4 loads a thread keeps in flight, and the statistics
# tasks' head start: 3/2 of the tickets in progress at once
PIPE_THREADS, PIPE_BLOCKS, PIPE_CHUNK, PIPE_DEPTH, PIPE_AHEAD = 512, 2, 16384, 4, (3, 2)


@dataclass(frozen=True)
class KernelSchedule:
    """What one kernel was written for: `cuda_kernel` writes its text from it and `cuda_launch_lines` its launch."""

    shape: str  # "elementwise" | "thread_rows" (a thread a row) | "block_rows" (a block a row) | "pipelined"
    threads: int  # the most threads a block the launch gives (short rows get fewer at run time)
    bounds: tuple[int, ...] = ()  # `__launch_bounds__` arguments; empty: none
    chunk: int = 0  # columns a task (elementwise and pipelined kernels)
    batch: int = 0  # 4-element vectors a thread loads per operand before computing any; 0: one at a time
    cached: tuple[int, ...] = ()  # block rows: the operands held in the register row cache (`rowcache`)
    k: int = ROW_CACHE_K  # 4-element vectors a thread keeps of each cached operand
    copy: bool = False  # the cached operand's next row is copied into shared memory meanwhile (`rowcopy`)
    elems_per_thread: int = 0  # block rows: row elements the launch gives each thread
    stagger: bool = False  # block rows: odd blocks start a little late (the writer's `_stagger`)
    blocks_per_sm: int = 0  # pipelined: the persistent grid's blocks an SM
    ahead: tuple[int, int] = (0, 1)  # pipelined: statistics run this fraction of the tickets in flight ahead
    split: bool = False  # block rows: a few long rows may be split over several blocks at run time (`split`)

    @property
    def bounds_text(self) -> str:
        return f"__launch_bounds__({', '.join(map(str, self.bounds))}) " if self.bounds else ""


def kernel_schedule(plan: KernelPlan, sched: Schedule) -> KernelSchedule:
    if plan.pipeline:
        return KernelSchedule("pipelined", PIPE_THREADS, (PIPE_THREADS, PIPE_BLOCKS), chunk=PIPE_CHUNK,
                              batch=PIPE_DEPTH, blocks_per_sm=PIPE_BLOCKS, ahead=PIPE_AHEAD)
    if not plan.npasses:
        full = sched.block and sched.unroll and sched.vectorize
        # batched elementwise kernels launch 64: at least 10 blocks an SM (96 registers a thread) keep enough loads
        # in flight (fewer registers spill, more cost occupancy: docs/PERF_NOTES.md)
        return KernelSchedule("elementwise", 64 if full else 256, (64, 10) if full else (), chunk=_chunk(plan, sched),
                              batch=UNROLL if sched.unroll and sched.vectorize else 0)
    cache = row_cache(plan, sched)
    # row kernels under `block_shape` launch up to the row cache's block limit; a block-per-row kernel is compiled
    # for that limit (the bound caps registers so such a launch always fits)
    threads = cache.block_limit if sched.block else 256
    if not (sched.parallel or sched.warp_reduce):
        return KernelSchedule("thread_rows", threads)
    return KernelSchedule("block_rows", threads, (cache.block_limit,), cached=cache.slots, k=cache.k,
                          copy=cache.copy, elems_per_thread=cache.elems_per_thread,
                          stagger=bool(cache.slots) and cache.block_limit == 1024, split=row_splittable(plan))


def _chunk(plan: KernelPlan, sched: Schedule) -> int:
    """Columns per elementwise task: one batch of the block (64 threads x UNROLL float4s) under `unroll`, four when
    each task first reads per-row values (a normalization's statistics, per-channel parameters), so those reads are
    paid over more elements (docs/PERF_NOTES.md). Elementwise threads: 64 under `unroll` (4 vectors in flight per
    thread and operand: one batch covers a 1024-element chunk, and 32 such blocks fill an SM), else 256."""
    if sched.block and sched.unroll and sched.vectorize:
        return 64 * 4 * UNROLL * (4 if plan.row_slots else 1)
    return 8192 if sched.block else 1024
