"""Choices of the CUDA writer measured on an H200, as written into the program text (CPU only: NVRTC is not needed
to read it): how deep a thread's register row cache of each operand is, the block size a kernel caching several
operands is compiled and launched for, the register bound of batched elementwise kernels, the variance folded into
its mean's pass on the streaming path, softmax's reciprocal, strided operands' row offsets from the host's (n, s)
pairs, bf16/fp16 operands kept packed in the cache, the staggered start of blocks alone on their SM, and the next
row copied into shared memory while a block works on the current one, and the L2 evict-last loads of operands that
other rows read again. The GPU tests judge such candidates correct."""

from __future__ import annotations

import re
import textwrap

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.schedule import Schedule

FULL = Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True, warp_reduce=True)


def _source(forward: str, inputs: str, init: str = "") -> str:
    return textwrap.dedent(f'''
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {init or "pass"}

            def forward(self, x, y):
                return {forward}


        def get_inputs():
            return {inputs}


        def get_init_inputs():
            return []
        ''')


def _kernel_text(program: str) -> str:
    return re.search(r'SOURCE = r"""(.*?)"""', program, re.S).group(1)


def _synthesize(source: str) -> str:
    res = BuiltinGenerationAgent(size_class="cpu").synthesize(source, "cuda", FULL, "p")
    assert res.program, res.error
    return res.program


@pytest.mark.parametrize("cols,depth", [(4096, 4), (16384, 4), (16388, 8), (32768, 8)])
def test_one_cached_operand_depth_follows_the_traced_row(cols, depth):
    """A single cached operand gets 4 float4s a thread for rows the launch covers with 16 elements a thread, 8 only
    for longer traced rows (registers reserved for an unused half spill other values)."""
    prog = _synthesize(_source("torch.softmax(x, dim=-1) + y", f"[torch.randn(2, {cols}), torch.randn(2, {cols})]"))
    src = _kernel_text(prog)
    assert re.findall(r"float4 C\d+\[(\d)\];", src) == [str(depth)]
    assert f"cols <= {4 * depth} * (long long)blockDim.x" in src  # the cached path's own bound agrees
    assert "__launch_bounds__(1024)" in src and "threads = min(1024, " in prog


def test_several_cached_operands_get_512_thread_blocks():
    """x and y are both read by every pass of a LayerNorm of their sum: a cache of two operands is compiled for at
    most 512 threads (registers for both) and launched with at most 512."""
    prog = _synthesize(_source("torch.nn.functional.layer_norm(x + y, (4096,))",
                               "[torch.randn(2, 4096), torch.randn(2, 4096)]"))
    src = _kernel_text(prog)
    assert re.findall(r"float4 C\d+\[(\d)\];", src) == ["4", "4"]
    assert "__launch_bounds__(512)" in src and "__launch_bounds__(1024)" not in src
    assert "threads = min(512, " in prog and "threads = min(1024, " not in prog


def test_uncached_row_kernels_keep_1024_and_fold_the_variance():
    """Without block_shape there is no cache: 1024-thread bounds, 256-thread launches, and the variance summed in
    its mean's pass (the streaming path)."""
    sched = Schedule(fuse=True, parallel=True, vectorize=True, warp_reduce=True)
    res = BuiltinGenerationAgent(size_class="cpu").synthesize(
        _source("torch.nn.functional.layer_norm(x + y, (4096,))", "[torch.randn(2, 4096), torch.randn(2, 4096)]"),
        "cuda", sched, "p")
    src = _kernel_text(res.program)
    assert not re.search(r"float4 C\d+\[", src)
    assert "__launch_bounds__(1024)" in src and "threads = min(256, " in res.program
    assert re.search(r"acc_\w+ \+= \(double\)\w+ \* \w+;", src)
    assert "< 0.0 ? 0.0 : kf_v_" in src  # a rounding negative is clamped, NaN is kept (not fmax)


def test_batched_elementwise_kernels_are_bounded_to_96_registers():
    prog = _synthesize(_source("torch.nn.functional.gelu(x) * y + 1.0", "[torch.randn(8, 4096), torch.randn(8, 4096)]"))
    src = _kernel_text(prog)
    assert "__launch_bounds__(64, 10)" in src and "block=(tx, ty)" in prog


def test_softmax_multiplies_by_the_reciprocal_sum():
    """One division per row (1.0f / sum), a multiplication per element."""
    prog = _synthesize(_source("torch.softmax(x, dim=-1) * y", "[torch.randn(4, 512), torch.randn(4, 512)]"))
    src = _kernel_text(prog)
    assert re.search(r"const float v_\w+ = \(1\.0f / v_\w*sum\w*\);", src)
    assert not re.search(r"v_\w*exp\w* / v_\w*sum", src)



def _stagger(src: str) -> re.Match | None:
    return re.search(r"#if __CUDA_ARCH__ >= 700\n\s*if \((?:!kf_tma && )?\(blockIdx\.x & 1\) && blockDim\.x == 1024 && "
                     r"cols <= (\d+) \* \(long long\)blockDim\.x && rows >= 4 \* \(long long\)gridDim\.x\) \{\n"
                     r"\s*__nanosleep\(\(unsigned\)min\(cols / 16, 8192ll\)\);\n\s*\}\n\s*#endif\n"
                     r"\s*for \(long long r = blockIdx\.x; r < rows; r \+= gridDim\.x\) \{", src)


def test_blocks_alone_on_their_sm_start_staggered():
    """A kernel that may run 1024-thread blocks holding whole rows in registers delays its odd blocks once, before
    the row loop, under the cached path's own bound (log-softmax 71 -> 77 % of the measured bandwidth on an H200);
    kernels capped at 512 threads, streaming row kernels and elementwise kernels do not."""
    src = _kernel_text(_synthesize(_source("torch.log_softmax(x, dim=-1) + y",
                                           "[torch.randn(2, 32768), torch.randn(2, 32768)]")))
    m = _stagger(src)
    assert m and m.group(1) == "32" and f"cols <= {m.group(1)} * (long long)blockDim.x && " in src[m.end():]
    assert src.count("__nanosleep") == 1
    two = _kernel_text(_synthesize(_source("torch.nn.functional.layer_norm(x + y, (4096,))",
                                           "[torch.randn(2, 4096), torch.randn(2, 4096)]")))
    assert "__launch_bounds__(512)" in two and "__nanosleep" not in two
    streaming = BuiltinGenerationAgent(size_class="cpu").synthesize(
        _source("torch.log_softmax(x, dim=-1) + y", "[torch.randn(2, 32768), torch.randn(2, 32768)]"), "cuda",
        Schedule(fuse=True, parallel=True, vectorize=True, warp_reduce=True), "p")
    assert "__nanosleep" not in _kernel_text(streaming.program)
    assert "__nanosleep" not in _kernel_text(_synthesize(_source("torch.relu(x) * y",
                                                                 "[torch.randn(8, 4096), torch.randn(8, 4096)]")))


@pytest.mark.parametrize("dtype,nbytes,vtype", [("", 4, "float4"), (".half()", 2, "uint2")])
def test_single_cached_operand_copies_its_next_row(dtype, nbytes, vtype):
    """One cached operand with dense rows: the kernel decides once whether it copies (the launch's shared memory,
    alignment of every row operand and output), copies the block's first row before the loop, and in the loop
    waits for this row, reads it from shared memory, then starts the next row's copy; the launch gives the row's
    bytes of shared memory with 1024 threads on sm_90+ (what the device allows) and one block an SM."""
    prog = _synthesize(_source(f"torch.log_softmax(x{'.float()' if dtype else ''}, dim=-1) * y",
                               f"[torch.randn(2, 32768){dtype}, torch.rand(32768)]"))
    src = _kernel_text(prog)
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in src  # the helper, sm_90+ only
    assert re.search(rf"const bool kf_tma = \(cols & 3\) == 0 && cols <= \d+ \* \(long long\)blockDim\.x && "
                     rf"kf_dyn_smem\(\) >= cols \* {nbytes} && [^;]*\(\(unsigned long long\)a1\)[^;]*"
                     rf"\(\(unsigned long long\)o0\) & 15\) == 0;", src)
    first, wait, read, copy = (src.index(t) for t in (
        "kf_copy_row(kf_nx, a0 + blockIdx.x * cols", "kf_copy_wait(&kf_bar, kf_phase);",
        f"reinterpret_cast<const {vtype}*>(kf_nx)[c4]", f"kf_copy_row(kf_nx, a0 + (r + gridDim.x) * cols, "
                                                     f"(unsigned)(cols * {nbytes}), &kf_bar);"))
    assert first < src.index("for (long long r = blockIdx.x;") < wait < read < copy
    assert "if (kf_tma || (" in src and "!kf_tma && (blockIdx.x & 1)" in src  # the copy replaces the stagger
    assert "self.kf_copy_smem = (kf_props.shared_memory_per_block_optin - 4096 if (kf_props.major, " in prog
    assert f"((cols * {nbytes}) & 15) == 0 && (((unsigned long long)a0) & 15) == 0" in src  # the copy engine's units
    assert f"smem = cols * {nbytes} if threads == 1024 and cols % 4 == 0 and cols * {nbytes} % 16 == 0 and " in prog
    assert "grid = max(1, min(rows, self.kf_sms if smem else " in prog and ", shared_mem=smem)" in prog


@pytest.mark.parametrize("forward,inputs", [
    ("torch.nn.functional.layer_norm(x + y, (4096,))", "[torch.randn(2, 4096), torch.randn(2, 4096)]"),  # 2 cached
    # x cached alone, but y (read once, in the last pass) is strided: its rows' alignment varies
    ("torch.softmax(x, dim=-1) * y.transpose(0, 1)", "[torch.randn(64, 64), torch.randn(64, 64)]"),
    ("torch.relu(x) * y", "[torch.randn(8, 4096), torch.randn(8, 4096)]"),  # elementwise
])
def test_other_kernels_do_not_copy_rows(forward, inputs):
    prog = _synthesize(_source(forward, inputs))
    assert "transpose" not in forward or re.search(r"float4 C0\[\d\];", prog) and "kf_off(r, meta" in prog
    assert "kf_copy_row" not in prog and "kf_tma" not in prog and "shared_mem=" not in prog
    assert "kf_copy_smem" not in prog

def test_strided_operands_read_their_offset_pair_once_per_thread():
    """An operand broadcast over leading dims (y) and one needing a division per dim (z, broadcast over a middle
    dim) both take their kf_fast pair from meta before the row loop; the Metal writer keeps its own kf_off."""
    src = _source("torch.softmax(x * y + z, dim=-1)",
                  "[torch.randn(4, 8, 16, 32), torch.randn(16, 32), torch.randn(4, 1, 16, 32)]")
    src = src.replace("def forward(self, x, y):", "def forward(self, x, y, z):")
    kernel = _kernel_text(_synthesize(src))
    pairs = re.findall(r"const long long kn(\d+) = meta\[(\d+)\], ks\1 = meta\[(\d+)\];", kernel)
    assert [(int(a), int(b)) for _, a, b in pairs] == [(9, 10), (11, 12)]  # after 3 row dims and 2 x 3 strides
    assert kernel.index("const long long kn") < kernel.index("for (long long r = blockIdx.x;")
    calls = re.findall(r"kf_off\(r, meta, meta \+ 3 \+ \d, 3, kn(\d+), ks(\d+)\)", kernel)
    assert len(calls) == 2 and all(a == b for a, b in calls)
    metal = BuiltinGenerationAgent(size_class="cpu").synthesize(src, "metal", FULL, "p").program
    assert "kn" not in re.search(r'SOURCE = r"""(.*?)"""', metal, re.S).group(1)
    assert re.search(r"kf_off\(r, meta, meta \+ 3 \+ \d, 3\)", metal)


def test_half_precision_cache_is_packed_and_twice_as_deep():
    """bf16 operands stay packed in the cache (uint2), widened at each use; a cache of only such operands holds 8
    vectors of each and the launch gives a thread 32 elements. Next to a float operand a bf16 one is still packed,
    but the depth and the launch stay those of float caches."""
    rms = "(H * torch.rsqrt(H.pow(2).mean(dim=-1, keepdim=True) + 1e-6))"
    src = _source(f"{rms.replace('H', '(x + y).float()')}.to(torch.bfloat16)",
                  "[torch.randn(2, 4096).to(torch.bfloat16), torch.randn(2, 4096).to(torch.bfloat16)]")
    prog = _synthesize(src)
    kernel = _kernel_text(prog)
    assert re.findall(r"(\w+) C\d+\[(\d)\];", kernel) == [("uint2", "8"), ("uint2", "8")]
    assert re.search(r"C0\[k\] = reinterpret_cast<const uint2\*>\(p0\)\[c4\];", kernel)
    assert "const float4 X0 = kf_ld4_bf16(C0[k]);" in kernel
    assert "cols <= 32 * (long long)blockDim.x" in kernel and "cols // 32 - 1" in prog

    mixed = _synthesize(_source(rms.replace("H", "(x.float() + y)"),
                                "[torch.randn(2, 4096).to(torch.bfloat16), torch.randn(2, 4096)]"))
    kernel = _kernel_text(mixed)
    assert sorted(re.findall(r"(\w+) C\d+\[(\d)\];", kernel)) == [("float4", "4"), ("uint2", "4")]
    assert "cols <= 16 * (long long)blockDim.x" in kernel and "cols // 16 - 1" in mixed


def test_operands_other_rows_read_again_load_with_an_l2_keep_hint():
    """A mask broadcast over batch and heads (read by every head) loads with the evict-last policy, in the register
    cache and on the streaming path; the scores, read once, do not; fp16 masks load packed through the same policy.
    Operands the same for every row, dense ones and Metal programs carry no hint."""
    src = _source("torch.softmax(x * 0.125 + y, dim=-1)", "[torch.randn(2, 4, 64, 64), torch.randn(64, 64)]")
    kernel = _kernel_text(_synthesize(src))
    assert "createpolicy.fractional.L2::evict_last.b64" in kernel and "__CUDA_ARCH__ >= 800" in kernel
    assert re.search(r"C1\[k\] = kf_keep_f4\(reinterpret_cast<const float4\*>\(p1\) \+ c4\);", kernel)
    assert re.search(r"X1 = kf_keep_f4\(reinterpret_cast<const float4\*>\(p1\) \+ c4\);", kernel)  # streaming path
    assert "kf_keep_f4(reinterpret_cast<const float4*>(p0)" not in kernel
    assert re.search(r"C0\[k\] = reinterpret_cast<const float4\*>\(p0\)\[c4\];", kernel)

    half = _kernel_text(_synthesize(_source("torch.softmax(x + y.float(), dim=-1)",
                                            "[torch.randn(2, 4, 64, 64), torch.randn(64, 64).half()]")))
    assert re.search(r"C0\[k\] = kf_keep_u2\(reinterpret_cast<const uint2\*>\(p0\) \+ c4\);", half)  # y first
    assert re.search(r"C1\[k\] = reinterpret_cast<const float4\*>\(p1\)\[c4\];", half)

    for forward, inputs in (("torch.softmax(x, dim=-1) * y", "[torch.randn(64, 64), torch.randn(64)]"),  # same rows
                            ("torch.softmax(x + y, dim=-1)", "[torch.randn(64, 64), torch.randn(64, 64)]")):  # dense
        assert "kf_keep" not in _synthesize(_source(forward, inputs))
    metal = BuiltinGenerationAgent(size_class="cpu").synthesize(src, "metal", FULL, "p").program
    assert metal and "kf_keep" not in metal and "createpolicy" not in metal
