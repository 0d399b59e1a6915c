"""GroupNorm's statistics and its normalizing pass in one persistent CUDA kernel, so the tensor is read from memory
once instead of twice (part of the `block_shape` move).

Unpipelined, GroupNorm is a row kernel computing each group's mean and 1/sqrt(var + eps), glue spreading them per
channel, and an elementwise kernel applying them (and the ops fused after it). On the gallery's 2 GiB map the
elementwise kernel's read misses the L2 cache (the statistics kernel read the whole tensor first), so the tensor
crosses the memory bus three times (two reads, one write) for a floor of two.

Pipelined, `PIPE_BLOCKS` blocks an SM take tasks from a global ticket counter, in an order that issues each group's
statistics tasks some groups ahead of its elementwise tasks: a statistics task sums x - k and (x - k)^2 (k the
group's first element, so the variance keeps its digits far from zero) over a chunk of the group; the elementwise
tasks of group g wait until all of g's chunks are in, combine them (fixed order: the same result every run) and run
the elementwise kernel's own body over their (row, chunk) task, re-reading x from L2 (evict-first) while the
statistics loads asked L2 to keep those lines (evict-last). Tickets make the wait safe: a block only waits for
statistics tasks of smaller tickets, which running blocks took and finish without waiting, however many blocks are
resident. The look-ahead is 3/2 of the tickets in progress at once (about `grid`), rounded down: less and
elementwise tasks wait, more and the re-read lines no longer fit the L2.

The sizes (512-thread blocks, two an SM, 16384-element tasks, 4 float4 loads in flight, the look-ahead) are the
fastest of those tried on an H100; the measurements and what was slower are in docs/PERF_NOTES.md.

The fold itself is the plan rewrite `group_norm_pipeline` (`plan.rewrites`), which the CUDA backend asks for under
`block_shape` with `vectorize`; this module writes the folded kernel (`KernelPlan.pipeline`) and its launch, both
from the kernel's schedule (`schedule.kernel_schedule`: the sizes above are its `PIPE_*`).
"""

from __future__ import annotations

from .. import emit
from .emitter import CudaWriter
from .schedule import KernelSchedule
from ..cexprs import flit
from ...plan.passes import row_program
from ...plan.plans import KernelPlan
from ...schedule import Schedule

# device helpers every pipelined kernel of a program shares (the writer adds them once)
CUDA_PIPE = r"""
// ticket t of a pipelined kernel: a statistics task (chunk j of group g; returns true) or an elementwise one (task j
// of group g). Order: statistics of groups [0, D); then per group b, statistics of group b + D and the elementwise
// tasks of b (nc statistics and A elementwise tasks a group, nb = groups - D)
__device__ __forceinline__ bool kf_pipe_task(int t, int nc, int A, int D, int nb, int* g, int* j) {
    const int P = D * nc, W = A + nc;
    if (t < P) { *g = t / nc; *j = t - *g * nc; return true; }
    if (t - P < nb * W) {
        const int u = t - P, b = u / W, i = u - b * W;
        *g = i < nc ? b + D : b; *j = i < nc ? i : i - nc;
        return i < nc;
    }
    const int v = t - P - nb * W;
    *g = nb + v / A; *j = v - (*g - nb) * A;
    return false;
}
// warp-wide sums of a pair of doubles (every lane gets them)
__device__ __forceinline__ void kf_warp_sum2_d(double& a, double& b) {
    for (int o = 16; o > 0; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
}
"""


class _PipeEmitter(CudaWriter):
    """x is read for the last time here and the output never again: both bypass what the cache should keep."""

    def vload(self, si: int, idx: str, packed: bool = False) -> str:
        if si == self.plan.pipeline["x"]:
            return f"__ldcs(reinterpret_cast<const float4*>(p{si}) + {idx})"
        return super().vload(si, idx, packed)

    def vstore(self, j: int, idx: str, value: str) -> str:
        if self.plan.outputs[j].dtype == "float":
            return f"__stcs(reinterpret_cast<float4*>(q{j}) + {idx}, {value});"
        return super().vstore(j, idx, value)


_EXTRA_PARAMS = ("double* __restrict__ kf_part, int* __restrict__ kf_cnt, long long kf_per, long long kf_nc, "
                "long long kf_ahead")


def pipeline_kernel(plan: KernelPlan, sched: Schedule, ks: KernelSchedule, params: str, loop_writer) -> str:
    """The folded kernel's text (it calls CUDA_PIPE's helpers); `params`: the elementwise kernel's own parameter
    list; `loop_writer`: the CUDA writer's `_cuda_loop`, so the elementwise body is written as unpipelined."""
    pipe = plan.pipeline
    e = _PipeEmitter(plan, sched)
    xi, eps, depth = pipe["x"], pipe["eps"], ks.batch
    w = e.w
    w(0, f"// {plan.label}")
    w(0, f'extern "C" __global__ void {ks.bounds_text}{plan.name}({params}, '
         f'{_EXTRA_PARAMS}) {{')
    w(1, "__shared__ int kf_tk[2];")
    w(1, "__shared__ double kf_red[64];")
    w(1, "__shared__ float kf_st[2];")
    w(1, f"const long long CH = {ks.chunk};")
    w(1, "const long long gcols = kf_per * cols;  // a statistics row (group)")
    w(1, "// task arithmetic in 32 bits (the host checks the count fits): 64-bit indices and divisions cost the")
    w(1, "// registers that decide how many blocks an SM holds")
    w(1, "const int groups = (int)(rows / kf_per), nch = (int)((cols + CH - 1) / CH);  // elementwise chunks a row")
    w(1, "const int A = (int)kf_per * nch, nc = (int)kf_nc;  // elementwise and statistics tasks of a group")
    w(1, "const int D = (int)min(kf_ahead, (long long)groups), nb = groups - D;")
    w(1, "const int total = groups * (nc + A);")
    w(1, "if (threadIdx.x == 0) kf_tk[0] = atomicAdd(kf_cnt, 1);")
    w(1, "__syncthreads();")
    w(1, "int kf_slot = 0;")

    w(1, "while (true) {")
    w(2, "const int t = kf_tk[kf_slot];")
    w(2, "if (t >= total) break;")
    w(2, "if (threadIdx.x == 0) kf_tk[kf_slot ^ 1] = atomicAdd(kf_cnt, 1);  // the next ticket, fetched meanwhile")
    w(2, "int g, j;")
    w(2, "if (kf_pipe_task(t, nc, A, D, nb, &g, &j)) {")
    w(3, f"const float* px = a{xi} + g * gcols;")
    w(3, "const long long lo = j * CH, hi = min(gcols, lo + CH);")
    w(3, "// sums of x - k, k the group's first element: var = E[(x-k)^2] - E[x-k]^2 keeps its digits when the mean")
    w(3, "// is far from zero (unshifted, float loses them all at |mean| = 1000 std); floats per batch, double across")
    w(3, "const float k = px[0];")
    w(3, "double su = 0.0, sq = 0.0;")
    w(3, "if ((gcols & 3) == 0 && (((unsigned long long)px) & 15) == 0) {")
    w(4, f"// {depth} loads in flight a thread before any is summed: one at a time halves the bandwidth")
    w(4, f"for (long long c4b = lo / 4 + threadIdx.x; c4b < hi / 4; c4b += {depth} * (long long)blockDim.x) {{")
    w(5, f"float4 B[{depth}];")
    for part in ("load", "sum"):
        w(5, "#pragma unroll")
        w(5, f"for (int u = 0; u < {depth}; ++u) {{")
        w(6, "const long long c4 = c4b + u * (long long)blockDim.x;")
        if part == "load":  # the elementwise tasks read these lines again soon: L2 keeps them
            w(6, "if (c4 < hi / 4) B[u] = kf_keep_f4(reinterpret_cast<const float4*>(px) + c4);")
        else:
            w(6, "if (c4 < hi / 4) {")
            w(7, "const float a = B[u].x - k, b = B[u].y - k, c = B[u].z - k, d = B[u].w - k;")
            w(7, "fs += (a + b) + (c + d);")
            w(7, "fq += (a * a + b * b) + (c * c + d * d);")
            w(6, "}")
        w(5, "}")
        if part == "load":
            w(5, "float fs = 0.0f, fq = 0.0f;")
    w(5, "su += fs; sq += fq;")
    w(4, "}")
    w(3, "} else {")
    w(4, "for (long long c = lo + threadIdx.x; c < hi; c += blockDim.x) {")
    w(5, "const double v = px[c] - k;")
    w(5, "su += v; sq += v * v;")
    w(4, "}")
    w(3, "}")
    w(3, "kf_warp_sum2_d(su, sq);")
    w(3, "if ((threadIdx.x & 31) == 0) { kf_red[threadIdx.x >> 5] = su; kf_red[32 + (threadIdx.x >> 5)] = sq; }")
    w(3, "__syncthreads();")
    w(3, "if (threadIdx.x < 32) {")
    w(4, "const int nw = blockDim.x >> 5;")
    w(4, "su = threadIdx.x < nw ? kf_red[threadIdx.x] : 0.0;")
    w(4, "sq = threadIdx.x < nw ? kf_red[32 + threadIdx.x] : 0.0;")
    w(4, "kf_warp_sum2_d(su, sq);")
    w(4, "if (threadIdx.x == 0) {")
    w(5, "kf_part[2 * ((long long)g * nc + j)] = su;")
    w(5, "kf_part[2 * ((long long)g * nc + j) + 1] = sq;")
    w(5, "__threadfence();  // the partial sums are visible before the count says so")
    w(5, "atomicAdd(kf_cnt + 1 + g, 1);")
    w(4, "}")
    w(3, "}")
    w(2, "} else {")
    w(3, "const int rr = j / nch;")
    w(3, "const long long r = g * kf_per + rr;")
    w(3, "const long long c0 = (long long)(j - rr * nch) * CH;")
    w(3, "const long long c1 = min(cols, c0 + CH);")
    w(3, "if (threadIdx.x < 32) {")
    w(4, "if (threadIdx.x == 0) {")
    w(5, "while (atomicAdd(kf_cnt + 1 + g, 0) < nc) __nanosleep(256);  // the group's statistics tasks finish")
    w(5, "__threadfence();")
    w(4, "}")
    w(4, "__syncwarp();")
    w(4, "double su = 0.0, sq = 0.0;")
    w(4, "for (int i = threadIdx.x; i < nc; i += 32) {")
    w(5, "su += __ldcg(kf_part + 2 * ((long long)g * nc + i));")
    w(5, "sq += __ldcg(kf_part + 2 * ((long long)g * nc + i) + 1);")
    w(4, "}")
    w(4, "kf_warp_sum2_d(su, sq);")
    w(4, "if (threadIdx.x == 0) {")
    w(5, "const double m = su / (double)gcols;")
    w(5, f"kf_st[0] = (float)(a{xi}[g * gcols] + m);")
    w(5, f"kf_st[1] = 1.0f / kf_sqrt((float)(sq / (double)gcols - m * m) + {flit(eps)});")
    w(4, "}")
    w(3, "}")
    w(3, "__syncthreads();")
    w(3, f"const float r{pipe['mean']} = kf_st[0];")
    w(3, f"const float r{pipe['rstd']} = kf_st[1];")
    prog = row_program(plan, cache_rows=False)
    e.offset_setup(3)  # here, not at the top: the statistics tasks need none of these registers
    e.row_begin(3, prog)
    for loop in prog.loops:
        loop_writer(e, 3, loop, "c0", "c1", "#pragma unroll 4", depth=depth)
    w(2, "}")
    w(2, "__syncthreads();  // kf_red, kf_st and this ticket slot are free again")
    w(2, "kf_slot ^= 1;")
    w(1, "}")
    w(0, "}")
    return e.text()


def pipeline_launch(plan: KernelPlan, names: dict, signature, ks: KernelSchedule) -> emit.Launch:
    """The folded kernel's launch: its elementwise operands as usual, plus the partial sums, the counters (ticket,
    then one per group) and the look-ahead in groups."""
    lines, outs, args = emit.prep_lines(plan, names)
    call = [args[role] for _, role in signature(plan)]
    per = plan.pipeline["per_row"]
    first = f"a{plan.pipeline['x']}"
    chunk, (ahead, ahead_per) = ks.chunk, ks.ahead
    lines += [f"if rows % {per}:",
              f"    raise ValueError(f'this synthesized GroupNorm expects a multiple of {per} channel rows, got {{rows}}')",
              f"kf_groups = rows // {per}",
              f"kf_nc = ({per} * cols + {chunk - 1}) // {chunk}",
              f"kf_tasks = kf_nc + {per} * ((cols + {chunk - 1}) // {chunk})  # statistics and elementwise, a group",
              f"grid = self.kf_sms * {ks.blocks_per_sm}",
              # the blocks work on about `grid` tickets at once: a group's statistics must be done when its
              # elementwise tickets come up, so they are issued more than that many tickets ahead
              f"kf_ahead = max(1, min(kf_groups, {ahead} * grid // ({ahead_per} * kf_tasks)))",
              "if kf_groups * kf_tasks >= 2 ** 31:",
              "    raise ValueError(f'tensor too large for the pipelined GroupNorm kernel: {rows} x {cols}')"]
    outs += [f"kf_part = torch.empty(2 * kf_groups * kf_nc, dtype=torch.float64, device={first}.device)",
             f"kf_cnt = torch.zeros(1 + kf_groups, dtype=torch.int32, device={first}.device)"]
    call_line = (f"self.kf_mod.{plan.name}(grid=(grid,), block=({ks.threads},), args=({', '.join(call)}, kf_part, "
                 f"kf_cnt, {per}, kf_nc, kf_ahead))")
    return emit.Launch(lines, outs, ["if rows and cols:", "    " + call_line])


__all__ = ["CUDA_PIPE", "pipeline_kernel", "pipeline_launch"]
