"""The CUDA row kernels' register row cache: which operands it holds, how many 4-element vectors a thread keeps of
each (bf16/fp16 packed), and the largest block a kernel holding them is compiled for and the elements a launch gives
a thread (`schedule.kernel_schedule` copies them into the kernel's schedule, which its text and launch read)."""

from __future__ import annotations

from dataclasses import dataclass

from ...plan.passes import has_cat, row_program
from ...plan.plans import KernelPlan
from ...schedule import Schedule

# 4-element vector access per storage type: the register type a load gives, and the alignment it needs
VTYPE = {"float": "float4", "kf_bf16": "float4", "kf_f16": "float4", "bool": "uchar4"}
VALIGN = {"float": 16, "kf_bf16": 8, "kf_f16": 8, "bool": 4}

ROW_CACHE_K = 4  # float4s per thread per operand in the register row cache (16 elements)
ROW_CACHE_K_ONE = 8  # a single cached operand of rows longer than 16384: 32 elements a thread, up to 32768 in 1024
# bf16/fp16 operands stay packed in the cache (4 elements in a uint2, 2 registers) and are widened at each use
PACKED = {"kf_bf16": "uint2", "kf_f16": "uint2"}


def cached_slots(plan: KernelPlan, prog=None) -> list[int] | None:
    """Slots a row kernel reads along the row, if all are float and some are read in more than one loop (only then
    does a cache save memory traffic); None when the register cache does not apply."""
    prog = prog or row_program(plan, cache_rows=False)
    reads: dict[int, int] = {}
    for loop in prog.loops:
        for si in loop.slots:
            reads[si] = reads.get(si, 0) + 1
    if not reads or max(reads.values()) < 2 or has_cat(plan):  # cat pieces index by column
        return None
    if any(VTYPE.get(plan.slots[si].ctype) != "float4" for si in reads):  # float, or bf16/fp16 (kept packed)
        return None
    if any(VTYPE.get(plan.outputs[j].dtype) != "float4" for lp in prog.loops for j in lp.outputs):
        return None
    return sorted(si for si, n in reads.items() if n >= 2)  # read once (a weight in the last pass): from memory


@dataclass(frozen=True)
class RowCache:
    """A block-per-row kernel's register row cache: the decision `kernel_schedule` reads."""

    slots: tuple[int, ...]  # the cached operands; empty: rows are streamed
    k: int  # 4-element vectors a thread keeps of each (see `row_cache`)
    packed: bool  # every cached operand is bf16/fp16, kept packed (half the registers a vector)
    copy: bool = False  # its next row is copied into shared memory meanwhile (`cuda_rowcopy`; sm_90+, at run time)

    @property
    def block_limit(self) -> int:
        """The most threads the kernel is compiled for (`__launch_bounds__`) and launched with.

        1024 caps a thread at 64 registers. A cache of two or more operands (32 floats a thread) plus the operands
        streamed in the last pass does not always fit in them (add+LayerNorm spilled), so such kernels are compiled for
        512. A single cached operand fits 64 registers, and more registers cost it occupancy (docs/PERF_NOTES.md)."""
        return 512 if len(self.slots) >= 2 else 1024

    @property
    def elems_per_thread(self) -> int:
        """Row elements the launch gives each thread (the block is sized from the row at run time): about 16, so a
        short row does not leave most of a block idle at each barrier; 32 when the cache is packed (twice the
        vectors in the same registers)."""
        return 4 * ROW_CACHE_K * (2 if self.packed else 1)


def row_cache(plan: KernelPlan, sched: Schedule, prog=None) -> RowCache:
    """The register row cache of a block-per-row kernel under `block_shape` (none without it, none for elementwise
    kernels).

    k: the launch gives a thread about 16 elements of the row (up to 1024 threads), so 4 vectors hold any row of up
    to 16384; only a single operand of longer traced rows gets 8 (softmax over 32768). The array's size is the
    registers the compiler reserves, used or not, so a deeper cache than the row needs spills (docs/PERF_NOTES.md).
    Longer run-time rows take the streaming path.

    A cache of only bf16/fp16 operands is packed, half the registers a vector, so it holds twice as many and the
    launch gives a thread twice the elements (the registers saved, left unused, would buy nothing:
    docs/PERF_NOTES.md).

    copy: a single cached operand whose rows, like every row operand's, are dense (or the same for every row) has
    its next row copied into shared memory while the block works on the current one (`cuda_rowcopy`)."""
    if not (sched.block and plan.npasses):
        return RowCache((), ROW_CACHE_K, False)
    prog = prog or row_program(plan, cache_rows=False)
    slots = tuple(cached_slots(plan, prog) or [])
    packed = bool(slots) and all(plan.slots[si].ctype in PACKED for si in slots)
    k = ROW_CACHE_K_ONE if len(slots) == 1 and plan.traced_cols > 4 * ROW_CACHE_K * 1024 else ROW_CACHE_K
    # a block per row (`parallelize_rows` or `warp_reduce`) walking its rows: the kernel shape that copies
    copy = bool((sched.parallel or sched.warp_reduce) and len(slots) == 1 and _dense(plan.slots[slots[0]]) and all(
        _dense(plan.slots[si]) or plan.slots[si].mode == "zero" for loop in prog.loops for si in loop.slots))
    return RowCache(slots, 2 * k if packed else k, packed, copy)


def _dense(slot) -> bool:
    """Row r of the operand starts at r * cols: the next row's address is known, and one alignment check of the
    operand covers every row (an operand the same for every row needs only the check)."""
    return slot.mode == "rowmajor" and slot.inner == 1
