"""The CUDA column reductions (sum, mean, max, min, argmax, argmin over dims that are not the last ones:
`synth/backends/columns.py`, KernelBench level 1's 47-53 at (128, 4096, 4095)), CPU only: the threads a column the
launch chooses for given sizes (`kf_col_split`), the kernels and launches as written, the CPU writer's programs
untouched, every kernel compiled by NVRTC for sm_90 where the library loads (no GPU needed), and the kernels as
written run on the CPU through an emulation of their threads and barriers (`cuda_emulation`) against PyTorch: NaN,
ties, columns of -inf, any number of rows a thread (none too), several rounds of the grid. The GPU tests
(`gpu/test_gpu_column_split.py`) judge the same candidates on a GPU."""

from __future__ import annotations

import pytest
import torch

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.backends.columns import COL_HELPERS
from kforge_core.synth.schedule import Schedule, first_schedule, order_for
from tests.column_reduction_cases import EXACT, KERNELBENCH, OPS, column_problem
from tests.cuda_emulation import HAVE_GPP, candidate
from tests.kernelbench_cases import CASES as KB_CASES, problem
from tests.nvrtc_only import compile_source, kernel_source, nvrtc

H100_SMS = 132


def _optimized() -> Schedule:
    sched = first_schedule("cuda")
    for move in order_for("cuda"):
        sched = sched.with_move(move)
    return sched


SCHEDULES = {"first": first_schedule("cuda"), "optimized": _optimized()}


def _col_split():
    ns: dict = {}
    exec(COL_HELPERS, ns)  # noqa: S102 - the helper text the programs embed
    return ns["kf_col_split"]


def _program(source: str, sched: Schedule, target: str = "cuda") -> str:
    res = BuiltinGenerationAgent(size_class="cpu").synthesize(source, target, sched, "p")
    assert res.program, res.error
    return res.program


@pytest.mark.parametrize("cols,R,k", [
    (128 * 4095, 4096, 8),  # KernelBench's 47-53: the columns fill an H100's resident threads 1.94 times
    (64 * 4096, 4096, 8),  # the gallery's mean over the middle dim at its GPU size
    (16, 1 << 20, 8),  # a few long columns: at most 8 threads
    (1 << 21, 4096, 4),  # 4 threads a column make 15.5 rounds of the GPU's resident threads, 8 would make 31
    (16, 100, 4),  # each thread keeps at least 16 rows
    (4096 * 4096, 4096, 1),  # the columns alone fill the GPU 62 times
    (16, 31, 1),  # too short to share
    (1, 1, 1),
    (0, 5, 1),
])
def test_threads_a_column_chosen_from_the_sizes(cols, R, k):
    assert _col_split()(cols, R, H100_SMS) == k


@pytest.mark.parametrize("sched", SCHEDULES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_reductions_share_columns_and_keep_loads_in_flight(op, sched):
    program = _program(column_problem(op), SCHEDULES[sched])
    src = kernel_source(program)
    # interleaved rows, 4 loads ahead
    assert "long long kf_r = threadIdx.y;" in src and "for (; kf_r + 3 * kf_k < R; kf_r += 4 * kf_k) {" in src
    assert "float kf_v[4];" in src and "for (int u = 0; u < 4; ++u) kf_v[u] = xo[(kf_r + u * kf_k) * sR];" in src
    # the partials folded in thread order by thread 0 of the column
    assert "for (unsigned int kf_j = 1; kf_j < kf_k; ++kf_j) {" in src
    assert "kf_k = kf_col_split(O * I, R, self.kf_sms)" in program
    assert "grid=(max(1, min((O * I + 127) // 128, 2147483647)),), block=(128, kf_k)" in program
    assert "__launch_bounds__(1024, 2) kf_c0(" in src  # 128 columns by up to 8 threads, 32 registers
    # partials in dynamic shared memory, 8 bytes a thread a state value, none when a thread owns its column
    nstate = 2 if "arg" in op else 1
    assert f"shared_mem={1024 * nstate} * kf_k if kf_k > 1 else 0)" in program
    assert "extern __shared__ double kf_colsh[];" in src
    if "arg" in op:  # int64 indices, partials compared as (value, index) pairs
        assert "long long* __restrict__ out" in src
        assert "long long* kf_sh_bi = (long long*)(kf_colsh + 1 * blockDim.x * blockDim.y);" in src
        assert "kf_p_bi < bi" in src


@pytest.mark.parametrize("op", OPS)
def test_cpu_programs_keep_a_serial_column_walk(op):
    program = _program(column_problem(op, (16, 64, 33)), Schedule(parallel=True, vectorize=True), target="cpu")
    assert "kf_col_split" not in program and "kf_sh_" not in program and "kf_v[" not in program
    assert "        for (int64_t r = 0; r < R; ++r) {" in program
    if "arg" in op:
        assert "for (int64_t j = 0; j < n; ++j) bi_[j] = 0;" in program


def test_other_column_kernels_are_not_split():
    """Softmax, logsumexp and scans over a leading dim keep a thread a column (their passes write every row)."""
    for case in ("softmax_dim1", "scans"):
        program = _program(KB_CASES[case], SCHEDULES["optimized"])
        assert "kf_col_split" not in program and "kf_sh_" not in kernel_source(program)


@pytest.mark.skipif(nvrtc() is None, reason="NVRTC does not load here (set KFORGE_NVRTC=/path/to/libnvrtc.so.12 to "
                                            "compile the kernels without a GPU); CI has none")
@pytest.mark.parametrize("sched", SCHEDULES, ids=str)
@pytest.mark.parametrize("source", [column_problem(op, KERNELBENCH) for op in OPS]
                         + [column_problem(op, (3, 5, 7)) for op in ("47_sum_keepdim", "51_argmax")]
                         + [KB_CASES["column_chains"], KB_CASES["column_rows"], KB_CASES["anydim"],
                            KB_CASES["argminmax"]],
                         ids=[*OPS, "sum_small", "argmax_small", "column_chains", "column_rows", "anydim",
                              "argminmax"])
def test_kernels_compile_with_nvrtc(source, sched):
    ok, log = compile_source(kernel_source(_program(source, SCHEDULES[sched])))
    assert ok, log


# ----------------------------------------------------------------------------------------------- emulated on the CPU

needs_gpp = pytest.mark.skipif(not HAVE_GPP, reason="no g++ to build the emulated kernels")


def _input(shape: tuple, kind: str, seed: int = 0) -> torch.Tensor:
    """x for the reductions: random, few distinct values (ties), NaNs here and there (in the first and last rows
    too), or columns of -inf and +inf among finite ones."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g)
    if kind == "ties":
        x = torch.floor(x * 4.0) / 4.0
    elif kind == "nan":
        x = torch.where(torch.rand(shape, generator=g) < 0.002, float("nan"), x)
        x[..., 0, :1] = float("nan")
        x[..., -1, -1:] = float("nan")
    elif kind == "inf":
        x[..., :1] = float("-inf")
        x[..., -1:] = float("inf")
    return x


def _reference(op: str, x: torch.Tensor) -> torch.Tensor:
    """PyTorch's result; sums and means in float64 rounded once (the kernels accumulate in double)."""
    if op in EXACT:
        return eval(OPS[op].replace("self.dim", "1"))  # noqa: S307 - our own expression
    return eval(OPS[op].replace("self.dim", "1").replace("(x,", "(x.double(),")).float()  # noqa: S307


def _check(op: str, got: torch.Tensor, x: torch.Tensor) -> None:
    want = _reference(op, x)
    assert got.dtype == want.dtype and got.shape == want.shape
    if op in EXACT:  # the same bits: values, NaNs, indices
        assert torch.equal(got.view(torch.int32) if got.is_floating_point() else got,
                           want.view(torch.int32) if want.is_floating_point() else want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """op -> (ModelNew constructor, kernel module): the first CUDA program of each reduction, emulated."""
    work = tmp_path_factory.mktemp("emulated")
    return {op: candidate(_program(column_problem(op, (2, 700, 5)), SCHEDULES["first"]), sms=1, workdir=work)
            for op in OPS}


@needs_gpp
@pytest.mark.parametrize("kind", ["rand", "ties", "nan", "inf"])
@pytest.mark.parametrize("shape", [(2, 700, 5), (1, 520, 37), (4, 300, 1), (3, 1, 33), (2, 3, 40), (1, 129, 1)],
                         ids=str)
@pytest.mark.parametrize("op", OPS)
def test_launched_kernels_match_pytorch(emulated, op, shape, kind):
    """Through the candidate's launch (as on a 1-SM GPU, so columns of 128 rows or more take 8 threads)."""
    build, _ = emulated[op]
    x = _input(shape, kind)
    _check(op, build(1)(x), x)


@needs_gpp
@pytest.mark.parametrize("k", [1, 2, 8])
@pytest.mark.parametrize("R", [1, 3, 17, 64, 75])
@pytest.mark.parametrize("op", OPS)
def test_any_threads_a_column_and_grid_rounds_match_pytorch(emulated, op, R, k):
    """The kernel called directly: k threads a column whatever R (threads with one row, or none), one block walking
    every column in rounds."""
    _, mod = emulated[op]
    x = _input((3, R, 45), "nan" if R > 2 else "ties", seed=R)
    want = _reference(op, x)
    out = torch.empty(want.numel(), dtype=want.dtype)
    nstate = 2 if "arg" in op else 1
    mod.kf_c0(grid=(1,), block=(128, k), args=(x, out, 3, R, 45, R * 45, 45, 1), shared_mem=8 * nstate * 128 * k)
    _check(op, out.view(want.shape), x)


# per-channel row values, a prologue and an epilogue around each split reduction (`plan.col_fusion`), over 300
# channels (8 threads a column on a 1-SM GPU)
FUSED = problem(forward="return (torch.tanh(torch.sum(x * self.s + self.b, dim=1)), torch.amax(x * self.n, dim=1), "
                        "torch.argmax(x - self.b, dim=1), torch.min(x * 2.0, dim=1)[0] + 1.0, "
                        "torch.mean(torch.relu(x), dim=1, keepdim=True) * 3.0)",
                inputs="[torch.randn(2, 300, 6, 7)]",
                ctor="self.s = nn.Parameter(torch.rand(300, 1, 1) + 0.5); self.b = nn.Parameter(torch.randn(300, 1, "
                     "1)); self.n = nn.Parameter(torch.randn(2, 1, 1, 1))")


@needs_gpp
def test_fused_chains_and_row_values_match_pytorch(tmp_path):
    program = _program(FUSED, SCHEDULES["optimized"])
    assert kernel_source(program).count("kf_sh_") >= 5 and "a0[o * R + r]" in kernel_source(program)
    build, _ = candidate(program, sms=1, workdir=tmp_path)
    ns: dict = {}
    exec(compile(FUSED, "problem", "exec"), ns)  # noqa: S102 - our own problem
    torch.manual_seed(0)
    ref, new = ns["Model"](), build()
    new.load_state_dict(ref.state_dict())
    x = torch.randn(2, 300, 6, 7)
    with torch.no_grad():
        for got, want in zip(new(x), ref(x)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
