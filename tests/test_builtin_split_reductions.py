"""Reductions with few outputs over many elements split over several thread blocks in the CUDA writer
(`synth/backends/cuda/split.py`), CPU only: the split the launch chooses for given sizes, the kernels and launches
as written (the split parameters, the last block's combine, BatchNorm's split statistics), the CPU writer's
programs untouched, and every kernel of the cases compiled by NVRTC for sm_90 where the library loads (no GPU
needed). The GPU tests (`gpu/test_gpu_split_reductions.py`) judge the same candidates."""

from __future__ import annotations

import re

import pytest
import torch

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.backends.host_helpers import helpers_for
from kforge_core.synth.schedule import Schedule, first_schedule
from tests.nvrtc_only import compile_source, kernel_source, nvrtc
from tests.split_reduction_cases import CASES, SPLITTING, mse_loss

FULL = Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True, warp_reduce=True)
SCHEDULES = {"first": first_schedule("cuda"), "optimized": FULL}
H200_SMS = 132


def _split_of():
    ns = {"torch": torch}
    exec(helpers_for({"kf_split_of"}), ns)  # noqa: S102 - the helper text the programs embed
    return ns["kf_split_of"]


def _program(source: str, sched: Schedule, target: str = "cuda") -> str:
    res = BuiltinGenerationAgent(size_class="cpu").synthesize(source, target, sched, "p")
    assert res.program, res.error
    return res.program


def _kernels(program: str) -> dict[str, str]:
    """Each kernel's parameter list, by name."""
    return {m.group(1): m.group(2) for m in re.finditer(
        r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(([^)]*)\)', kernel_source(program))}


@pytest.mark.parametrize("rows,n,threads,split", [
    (1, 32768 * 32768, 1024, 2 * 2 * H200_SMS),  # MSELoss: one value over 1G elements: two rounds of the GPU
    (64, 64 * 512 * 512, 256, 33),  # KernelBench's BatchNorm: 64 channels of 16.7M elements
    (128, 24 * 22 * 30 * 30, 1024, 5),  # level2/23's mean over all but the batch
    (4, 1 << 20, 1024, 16),  # long enough for 16 segments of 64 elements a thread
])
def test_few_long_reductions_split_over_blocks(rows, n, threads, split):
    got, seg = _split_of()(rows, n, threads, H200_SMS)
    assert got == split
    assert seg % 4 == 0 and (got - 1) * seg < n <= got * seg  # no empty segment, every element covered
    assert seg >= 64 * threads


@pytest.mark.parametrize("rows,n,threads", [
    (4096, 4096, 256),  # many short rows fill the GPU already
    (528, 1 << 20, 1024),  # two rounds of 1024-thread blocks: as many rows as blocks
    (512, 123039, 1024),  # level2/15's spatial mean: long rows, but many
    (1, 100_000, 1024),  # one row too short to share: fewer than 64 elements a thread in two blocks
    (0, 5, 32),  # nothing to do
])
def test_many_or_short_reductions_keep_a_block_a_row(rows, n, threads):
    assert _split_of()(rows, n, threads, H200_SMS) == (1, n)


@pytest.mark.parametrize("sched", SCHEDULES, ids=str)
def test_a_loss_reduced_to_one_value_splits_and_combines(sched):
    program = _program(mse_loss(4096), SCHEDULES[sched])
    src = kernel_source(program)
    reducing = [k for k, params in _kernels(program).items() if "kf_split" in params]
    assert len(reducing) == 1  # the mean; the elementwise kernels of the first program do not split
    assert "bool kf_split_last(" in src and "kf_split_last(kf_done + r, kf_split)" in src
    assert "kf_split_sum(kf_p + 0 * kf_split, kf_split)" in src
    assert "kf_split, kf_seg = kf_split_of(rows, cols, threads, self.kf_sms)" in program
    assert "grid = max(1, min(rows * kf_split, " in program
    assert "kf_done = torch.zeros(rows, dtype=torch.int32" in program


def test_a_max_and_a_folded_variance_combine_every_accumulator():
    """A max combines its partials as a max; a variance over everything stores its sum and its folded squares."""
    program = _program(CASES["full_reductions"], FULL)
    src = kernel_source(program)
    assert re.search(r"acc_amax = -INFINITY; acc_amax = kf_split_ext\(kf_p \+ 0 \* kf_split, kf_split, 1,", src)
    assert re.search(r"acc_amin = INFINITY; acc_amin = kf_split_ext\(kf_p \+ 0 \* kf_split, kf_split, 2,", src)
    assert "double* kf_p = kf_part + r * (2 * kf_split);" in src
    assert "kf_p[0 * kf_split + kf_s] = kf_b0; kf_p[1 * kf_split + kf_s] = kf_b1;" in src
    assert "kf_part = torch.empty(2 * rows * kf_split, dtype=torch.float64" in program


def test_row_kernels_with_elementwise_outputs_do_not_split():
    """Softmax needs its row's max and sum before it writes: its kernel keeps a block a row, no split parameters."""
    program = _program(CASES["convt3d_bn_subtract"], FULL)  # the mean subtracted in the same kernel
    params = _kernels(program)
    assert not any("kf_split" in p for k, p in params.items() if k.startswith("kf_k"))
    soft = _program("\n".join(CASES["mse_loss"].replace(
        "torch.mean((predictions - targets) ** 2)", "torch.softmax(predictions - targets, dim=-1)").splitlines()), FULL)
    assert not any("kf_split" in p for p in _kernels(soft).values())
    assert "kf_split_last" not in kernel_source(soft)


@pytest.mark.parametrize("sched", SCHEDULES, ids=str)
def test_batch_norm_statistics_split_channels(sched):
    program = _program(CASES["batch_norm"], SCHEDULES[sched])
    src = kernel_source(program)
    stats = _kernels(program)["kf_c0"]
    assert "long long kf_split, long long kf_seg, double* __restrict__ kf_part" in stats
    assert "if (kf_split == 1) {" in src  # a block a channel, two passes, as before
    assert "const double k = isfinite(k0) ? (double)k0 : 0.0;" in src  # the split's shift
    assert "if (!kf_split_last(kf_done + c, kf_split)) continue;" in src
    assert "kf_split, kf_seg = kf_split_of(R, O * I, 256, self.kf_sms)" in program
    assert "grid=(max(1, min(R * kf_split, self.kf_sms * 8)),)" in program


def test_cpu_programs_do_not_split():
    for case in ("mse_loss", "batch_norm"):
        program = _program(CASES[case], Schedule(parallel=True), target="cpu")
        assert "kf_split" not in program


@pytest.mark.skipif(nvrtc() is None, reason="NVRTC does not load here (set KFORGE_NVRTC=/path/to/libnvrtc.so.12 to "
                                            "compile the kernels without a GPU); CI has none")
@pytest.mark.parametrize("sched", SCHEDULES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_kernels_compile_with_nvrtc(case, sched):
    program = _program(CASES[case], SCHEDULES[sched])
    ok, log = compile_source(kernel_source(program))
    assert ok, log
    if case in SPLITTING:
        assert any("kf_split" in p for p in _kernels(program).values())
