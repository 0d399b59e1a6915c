"""The next row copied into shared memory while a block works on the current one (sm_90+): a row kernel whose
register row cache holds a single operand asks the copy engine (`cp.async.bulk`, completion counted on an
mbarrier) for its next row as soon as this row is in registers, so the row's reads from memory overlap the
reductions and stores of the row before it.

One block per SM walks its rows (a grid of more blocks than fit was slower; measurements in docs/PERF_NOTES.md).

The kernel decides at its start, for all its rows at once, whether it copies (`kf_tma`): the launch gave it the
row's bytes of dynamic shared memory, the row length is a multiple of 4 and fits the cache, a row is a multiple of
16 bytes, the copied operand starts 16-byte aligned, and every other row operand and output starts aligned (with a
dense row layout every row then is). The launch gives the memory only on sm_90+,
with 1024 threads, when the row fits the device's shared memory a block may use.
"""

from __future__ import annotations

from .emitter import CudaWriter
from .rowcache import PACKED
from .schedule import KernelSchedule
from ...plan.plans import KernelPlan

ELEM_BYTES = {"float": 4, "kf_bf16": 2, "kf_f16": 2}

# device helpers (inline PTX): shared-memory address, the copy of one row with its byte count expected on the barrier,
# and the wait for a barrier phase
CUDA_ROWCOPY = r"""
#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned kf_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned kf_dyn_smem() {
    unsigned n;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}
__device__ __forceinline__ void kf_copy_row(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(kf_smem(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(kf_smem(dst)), "l"(src), "r"(bytes), "r"(kf_smem(bar)) : "memory");
}
__device__ __forceinline__ void kf_copy_wait(unsigned long long* bar, unsigned phase) {
    asm volatile("{\n\t.reg .pred p;\n\tKF_WAIT%=:\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra KF_WAIT%=;\n\t}" :: "r"(kf_smem(bar)), "r"(phase) : "memory");
}
#endif
"""


def copy_setup(e: CudaWriter, plan: KernelPlan, ks: KernelSchedule, row_slots: list[int], d: int = 1) -> None:
    """Declares the copy's shared memory and barrier, decides `kf_tma` and starts the copy of the block's first row."""
    si = ks.cached[0]
    nbytes = ELEM_BYTES[plan.slots[si].ctype]
    e.w(d, "extern __shared__ __align__(128) unsigned char kf_nx[];")
    e.w(d, "#if __CUDA_ARCH__ >= 900")
    e.w(d, "__shared__ __align__(8) unsigned long long kf_bar;")
    e.w(d, "unsigned kf_phase = 0;")
    # the copy engine moves multiples of 16 bytes between 16-byte aligned addresses
    conds = ["(cols & 3) == 0", f"cols <= {4 * ks.k} * (long long)blockDim.x",
             f"kf_dyn_smem() >= cols * {nbytes}", f"((cols * {nbytes}) & 15) == 0",
             f"(((unsigned long long)a{si}) & 15) == 0"]
    conds += [e.aligned(f"a{i}", plan.slots[i].ctype) for i in row_slots if i != si]
    conds += [e.aligned(f"o{j}", o.dtype) for j, o in enumerate(plan.outputs) if o.level == "E"]
    if ks.split:  # a split launch streams segments of rows (`split`), never whole rows through the copy
        conds.insert(0, "kf_split == 1")
    e.w(d, f"const bool kf_tma = {' && '.join(conds)};")
    e.w(d, "if (kf_tma) {")
    e.w(d + 1, "if (threadIdx.x == 0) {")
    e.w(d + 2, 'asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(kf_smem(&kf_bar)) : "memory");')
    e.w(d + 2, 'asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");')
    e.w(d + 2, "if (blockIdx.x < rows) {")
    e.w(d + 3, f"kf_copy_row(kf_nx, a{si} + blockIdx.x * cols, (unsigned)(cols * {nbytes}), &kf_bar);")
    e.w(d + 2, "}")
    e.w(d + 1, "}")
    e.w(d + 1, "__syncthreads();")
    e.w(d, "}")
    e.w(d, "#else")
    e.w(d, "const bool kf_tma = false;")
    e.w(d, "#endif")


def copy_load(e: CudaWriter, plan: KernelPlan, ks: KernelSchedule, d: int) -> None:
    """The cached operand's row from shared memory (after waiting for its copy), then the next row's copy started
    once every thread has read this one; without the copy, from memory."""
    si = ks.cached[0]
    vtype = PACKED.get(plan.slots[si].ctype, "float4")
    nbytes = ELEM_BYTES[plan.slots[si].ctype]
    e.w(d, "if (kf_tma) {")
    e.w(d, "#if __CUDA_ARCH__ >= 900")
    e.w(d + 1, "kf_copy_wait(&kf_bar, kf_phase);")
    e.w(d + 1, "kf_phase ^= 1;")
    cache_loads(e, d + 1, ks, lambda _, c4: f"reinterpret_cast<const {vtype}*>(kf_nx)[{c4}]")
    e.w(d + 1, "__syncthreads();  // every thread has its part of the row: the buffer takes the next one")
    e.w(d + 1, "if (threadIdx.x == 0 && r + gridDim.x < rows) {")
    e.w(d + 2, 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");')
    e.w(d + 2, f"kf_copy_row(kf_nx, a{si} + (r + gridDim.x) * cols, (unsigned)(cols * {nbytes}), &kf_bar);")
    e.w(d + 1, "}")
    e.w(d, "#endif")
    e.w(d, "} else {")
    cache_loads(e, d + 1, ks, lambda i, c4: e.vload(i, c4, packed=plan.slots[i].ctype in PACKED))
    e.w(d, "}")


def cache_loads(e: CudaWriter, d: int, ks: KernelSchedule, vector) -> None:
    """Fills each cached operand's registers: `vector(slot, c4)` is the slot's 4-element vector at index c4."""

    def fill(dd):
        for si in ks.cached:
            e.w(dd, f"C{si}[k] = {vector(si, 'c4')};")

    cache_loop(e, d, ks, fill)


def cache_loop(e: CudaWriter, d: int, ks: KernelSchedule, inner) -> None:
    """A loop over this thread's k vectors of the cached row, at c4 (the vector's index in the row); `inner(depth)`
    writes its body."""
    e.w(d, "#pragma unroll")
    e.w(d, f"for (int k = 0; k < {ks.k}; ++k) {{")
    e.w(d + 1, "const long long c4 = threadIdx.x + k * (long long)blockDim.x;")
    e.w(d + 1, "if (c4 < cols / 4) {")
    inner(d + 2)
    e.w(d + 1, "}")
    e.w(d, "}")
