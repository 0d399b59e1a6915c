"""Reductions split over several thread blocks: a few outputs, each over many elements, would otherwise leave most of
the GPU idle (a loss reduced to one value ran in one block, 73x slower than eager; BatchNorm's statistics ran one
block a channel, 64 blocks on a 132-SM GPU).

The launch decides at run time (`kf_split_of`, a host helper): when the rows (or channels) alone are fewer than two
rounds of the GPU's resident blocks and long enough, each is cut into `kf_split` segments of `kf_seg` elements (a
multiple of 4, so vector loads stay aligned), one task a segment; otherwise `kf_split` is 1 and the kernel runs as
it always did, one block a row.

A split task reduces its segment within its block, thread 0 writes the block's partials (doubles) to `kf_part` and
counts the block in on the row's counter (`kf_done`, zeroed by the launch); the block counting last combines the
row's partials and finishes the row as an unsplit block would. The combine reads the partials by segment index, in
a fixed order whatever order the blocks finished in, so a result is the same on every run (no float atomics).

Written here: the device helpers (`CUDA_SPLIT`), which row kernels may split (`row_splittable`), their extra
parameters, task loop and combine, and the launch lines. BatchNorm's statistics kernel (`bnstats`) splits the same
way with its own sums.
"""

from __future__ import annotations

from .emitter import CudaWriter
from ...plan.passes import row_program
from ...plan.plans import KernelPlan

# device helpers every split kernel of a program shares (the writer adds them once)
CUDA_SPLIT = r"""
// a split reduction's block is done with its segment: thread 0 has written the block's partials; true in the block
// counting last on the row's counter (every other block fenced its partials before counting, so all are visible)
__device__ __forceinline__ bool kf_split_last(unsigned int* done, long long n) {
    __shared__ bool kf_last;
    if (threadIdx.x == 0) {
        __threadfence();
        kf_last = atomicAdd(done, 1u) == (unsigned int)(n - 1);
    }
    __syncthreads();
    const bool last = kf_last;
    __syncthreads();  // kf_last is written again by the block's next task
    if (last) __threadfence();
    return last;
}
// this thread's share of n partials, p[t] + p[t + blockDim.x] + ..., in that order (read past L1: other blocks'
// writes); a block sum of the shares is the same on every run
__device__ __forceinline__ double kf_split_sum(const double* p, long long n) {
    double s = 0.0;
    for (long long j = threadIdx.x; j < n; j += blockDim.x) s += __ldcg(p + j);
    return s;
}
// the same for a max (op 1) or min (op 2), compared as the row kernels' accumulators are
__device__ __forceinline__ float kf_split_ext(const double* p, long long n, int op, float acc) {
    for (long long j = threadIdx.x; j < n; j += blockDim.x) {
        const float v = (float)__ldcg(p + j);
        acc = op == 1 ? (v > acc ? v : acc) : (v < acc ? v : acc);
    }
    return acc;
}
"""

SPLIT_PARAMS = [("long long kf_split", "split"), ("long long kf_seg", "seg"),
                ("double* __restrict__ kf_part", "part"), ("unsigned int* __restrict__ kf_done", "done")]
_ROLES = {"split": "kf_split", "seg": "kf_seg", "part": "kf_part", "done": "kf_done"}
_OPS = {"max": 1, "min": 2}


def row_splittable(plan: KernelPlan) -> bool:
    """Whether a block-per-row kernel may split its rows: one pass over the row (a variance folded into its mean's
    counts as none) and row outputs only. A second pass, or elementwise outputs, would need every block of the row
    to wait for the first pass's combined result."""
    if plan.pipeline is not None:
        return False
    loops = [lp for lp in row_program(plan, cache_rows=False).loops if lp.index not in plan.variance_folds]
    return len(loops) == 1 and loops[0].kind == "pass"


def _pass(plan: KernelPlan):
    """The kernel's one pass over the row that is not folded into another (a splittable kernel has one)."""
    return next(lp for lp in row_program(plan, cache_rows=False).loops if lp.index not in plan.variance_folds)


def split_accumulators(plan: KernelPlan, loop=None) -> list[str]:
    """The accumulators of a split kernel's pass (by default its one pass), in the order its partials are stored:
    the pass's reductions, then the squares folded into it (as `acc_init` declares them)."""
    loop = loop or _pass(plan)
    folded = {m: r2 for m, r2 in plan.variance_folds.values()}
    return list(loop.reds) + [folded[m] for m in loop.reds if m in folded]


def task_loop_head(e: CudaWriter, d: int) -> None:
    """The grid-stride loop over tasks (row r, segment kf_s: columns [kf_lo, kf_hi)) that replaces the loop over
    rows; with kf_split 1 a task is a whole row, as before."""
    e.w(d, "for (long long kf_t = blockIdx.x; kf_t < rows * kf_split; kf_t += gridDim.x) {")
    e.w(d + 1, "const long long r = kf_split == 1 ? kf_t : kf_t / kf_split, kf_s = kf_t - r * kf_split;")
    e.w(d + 1, "const long long kf_lo = kf_s * kf_seg, kf_hi = min(cols, kf_lo + kf_seg);")


def combine(e: CudaWriter, d: int, accs: list[str], warp: str) -> None:
    """After a split task's pass: the block's partials out, and in the row's last block each thread's accumulators
    replaced by its share of the row's partials, so the pass's usual block reductions that follow give the row's
    totals; the other blocks go on to their next task."""
    ops = [e.by[a].red["op"] for a in accs]
    e.w(d, "if (kf_split > 1) {")
    e.w(d + 1, f"double* kf_p = kf_part + r * ({len(accs)} * kf_split);")
    for i, (a, op) in enumerate(zip(accs, ops)):
        total = (f"kf_block_reduce(acc_{a}, {_OPS[op]}, kf_sh, {warp})" if op in _OPS else
                 f"kf_block_sum_d(acc_{a}, kf_shd, {warp})")
        e.w(d + 1, f"const double kf_b{i} = (double){total};")
    stores = " ".join(f"kf_p[{i} * kf_split + kf_s] = kf_b{i};" for i in range(len(accs)))
    e.w(d + 1, f"if (threadIdx.x == 0) {{ {stores} }}")
    e.w(d + 1, "if (!kf_split_last(kf_done + r, kf_split)) continue;")
    for i, (a, op) in enumerate(zip(accs, ops)):
        share = (f"kf_split_ext(kf_p + {i} * kf_split, kf_split, {_OPS[op]}, acc_{a})" if op in _OPS else
                 f"kf_split_sum(kf_p + {i} * kf_split, kf_split)")
        # a max / min starts again from its identity: acc_ still holds this block's own segment
        reset = f"acc_{a} = {'-INFINITY' if op == 'max' else 'INFINITY'}; " if op in _OPS else ""
        e.w(d + 1, f"{reset}acc_{a} = {share};")
    e.w(d, "}")


def launch_setup(threads: str) -> list[str]:
    """The launch's split (set-up lines: they depend on the sizes only)."""
    return [f"kf_split, kf_seg = kf_split_of(rows, cols, {threads}, self.kf_sms)"]


def launch_buffers(naccs: int, count: str, device: str) -> list[str]:
    """Per call: the partials (`naccs` a task) and the zeroed counters (one per row) of a split launch; None
    (null pointers the kernel never reads) when it does not split."""
    return [f"kf_part = torch.empty({naccs} * {count} * kf_split, dtype=torch.float64, device={device}) "
            "if kf_split > 1 else None",
            f"kf_done = torch.zeros({count}, dtype=torch.int32, device={device}) if kf_split > 1 else None"]


def launch_args(args: dict) -> dict:
    """The launch's argument names by signature role, with the split's."""
    return dict(args, **_ROLES)


__all__ = ["CUDA_SPLIT", "SPLIT_PARAMS", "combine", "launch_args", "launch_buffers", "launch_setup", "row_splittable",
           "split_accumulators", "task_loop_head"]
