"""The numerics of the built-in generator's kernels: its vectorized math against torch over wide ranges, and
bf16 / fp16 in kernels (one-kernel add+RMSNorm, bit-exact half chains, exhaustive half conversions, and half
precision left in PyTorch where a writer lacks it).
"""

from __future__ import annotations

import pytest

from kforge_core.synth.schedule import Schedule, read_marker
from tests.builtin_fixtures import _judge, _src, agent  # noqa: F401 - pytest fixtures


# ---------------------------------------------------------------------------------------- vectorized math

def test_vectorized_math_matches_torch_over_wide_ranges():
    """The inline exp/log/tanh/erf the `vectorize` move uses, against torch, far beyond randn's range."""
    import torch

    from kforge_core.synth.backends.cpu import COMMON_MATH, VECTOR_MATH
    from platforms.cpu import compile_cpp

    funcs = {"exp": "kf_exp", "log": "kf_log", "tanh": "kf_tanh", "erf": "kf_erf", "log1p": "kf_log1p",
             "expm1": "kf_expm1"}
    src = "#include <cmath>\n#include <cstdint>\n#include <cstring>\n" + VECTOR_MATH + COMMON_MATH
    for name, fn in funcs.items():
        src += (f'extern "C" void t_{name}(const float* x, float* o, int64_t n) {{\n#pragma omp simd\n'
                f"for (int64_t i = 0; i < n; ++i) o[i] = {fn}(x[i]);\n}}\n")
    lib = compile_cpp(src, extra_cflags=("-fno-math-errno",))
    wide = torch.cat([torch.linspace(-110.0, 110.0, 400_001), torch.randn(100_000) * 3,
                      torch.tensor([0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 88.0, 88.7, 89.0, -87.0, -104.0,
                                    float("inf"), float("-inf")])])
    positive = torch.cat([torch.logspace(-37, 38, 200_001), torch.rand(10_000) * 2, torch.tensor([float("inf")])])
    cases = {"exp": wide, "tanh": wide, "erf": wide, "log": positive, "log1p": wide.clamp(min=-0.999),
             "expm1": wide.clamp(max=80)}
    for name, x in cases.items():
        x = x.contiguous()
        out = torch.empty_like(x)
        getattr(lib, f"t_{name}")(x, out, x.numel())
        want = getattr(torch, name)(x.double()).float()
        finite = torch.isfinite(want)
        assert torch.equal(torch.isfinite(out), finite) or name == "exp", name
        err = (out[finite].double() - want[finite].double()).abs()
        tol = 2e-7 + 2e-6 * want[finite].double().abs()  # a few ulp, and 2e-7 absolute near zero
        worst = int(torch.argmax(err - tol))
        assert bool((err <= tol).all()), f"{name}: x={float(x[finite][worst])} got {float(out[finite][worst])} " \
                                         f"want {float(want[finite][worst])}"
        if name == "exp":  # overflow / underflow ends: inf stays inf, tiny results are within 1e-37 of 0
            assert torch.isinf(out[torch.isinf(want)]).all()


# ------------------------------------------------------------------------------------ bf16 / fp16 in kernels

ADD_RMSNORM_BF16 = _src('''
    """bf16 residual add, RMSNorm in fp32, cast back to bf16, times a bf16 weight (LLM decoder style)."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, hidden, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(hidden)).to(torch.bfloat16))

        def forward(self, x, residual):
            h = (x + residual).float()
            h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
            return h.to(torch.bfloat16) * self.weight


    def get_inputs():
        return [torch.randn(4, 33, 200, dtype=torch.bfloat16), torch.randn(4, 33, 200, dtype=torch.bfloat16)]


    def get_init_inputs():
        return [200, 1e-6]
''')


def _half_chain(dtype: str) -> str:
    return _src(f'''
        """A {dtype} elementwise chain: silu(x) * y + 1, a float32 detour and casts back."""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Model(nn.Module):
            def forward(self, x, y):
                h = F.silu(x) * y + 1
                g = (h.float() * 0.1 - y.type(torch.float32)).{ {"bfloat16": "bfloat16", "float16": "half"}[dtype] }()
                return torch.maximum(h, g) - 0.3, (g > 0.2).to(torch.{dtype}) / 3


        def get_inputs():
            return [(torch.randn(3, 41, 300) * 3).to(torch.{dtype}), torch.randn(3, 41, 300).to(torch.{dtype})]


        def get_init_inputs():
            return []
    ''')


def _run_in_process(source: str, program: str, seed: int = 0):
    """The problem's Model and the candidate's ModelNew (same state) on the same inputs: (reference, candidate)."""
    import torch

    prob, cand = {"__name__": "kf_problem"}, {"__name__": "kf_candidate"}
    exec(compile(source, "problem", "exec"), prob)  # noqa: S102 - test-owned sources
    exec(compile(program, "candidate", "exec"), cand)  # noqa: S102
    torch.manual_seed(seed)
    model = prob["Model"](*prob["get_init_inputs"]())
    new = cand["ModelNew"](*prob["get_init_inputs"]())
    new.load_state_dict(model.state_dict())
    inputs = prob["get_inputs"]()
    with torch.no_grad():
        want, got = model(*inputs), new(*inputs)
    return (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))


FULL_CPU = Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True)


def test_bf16_add_rmsnorm_is_one_kernel_and_correct(agent):
    """Loads widen bf16 to float, the add rounds to bf16, `.float()` is exact, `.to(bf16)` and the weight product
    round: the whole module is one row kernel writing bf16."""
    for sched in (FULL_CPU, Schedule()):
        res = agent.synthesize(ADD_RMSNORM_BF16, "cpu", sched, "add_rmsnorm_bf16")
        assert res.program, res.error
        assert "9 of 9 nodes (100%) synthesized" in res.notes and "kept in PyTorch" not in res.notes, res.notes
        kernels = read_marker(res.program)["kernels"]
        assert len(kernels) == (1 if sched.fuse else 9), kernels
        assert "uint16_t" in res.program and "kf_st_bf16" in res.program
        _judge(ADD_RMSNORM_BF16, res.program, "add_rmsnorm_bf16")
        want, got = _run_in_process(ADD_RMSNORM_BF16, res.program)
        assert got[0].dtype == want[0].dtype == __import__("torch").bfloat16
        assert (got[0].float() - want[0].float()).abs().max().item() <= 2 ** -5  # a bf16 ulp at most


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_elementwise_chain_is_bit_exact(agent, dtype):
    """Each half-precision op computes in float and rounds once (Python numbers in add/sub/compare rounded to the
    tensor dtype first, in mul/div kept in float), exactly as PyTorch eager does, under both schedules."""
    import torch

    source = _half_chain(dtype)
    for sched in (Schedule(), FULL_CPU):
        res = agent.synthesize(source, "cpu", sched, f"chain_{dtype}")
        assert res.program, res.error
        assert "(100%) synthesized" in res.notes and "kept in PyTorch" not in res.notes, res.notes
        _judge(source, res.program, f"chain_{dtype}")
        want, got = _run_in_process(source, res.program)
        for w, g in zip(want, got):
            assert g.dtype == w.dtype == getattr(torch, dtype)
            diff = int((w.float() != g.float()).sum())
            assert torch.equal(w, g), f"{diff} of {w.numel()} elements differ"


def test_half_conversions_match_torch_exhaustively():
    """The bit-level bf16/fp16 conversions: every 16-bit pattern widens as torch does, and floats (random, ties,
    overflow, subnormal, inf, NaN) round to nearest even as torch's .to() does."""
    import torch

    from kforge_core.synth.backends.cpu import HALF_BITS
    from kforge_core.synth.backends.cexprs import HALF_MATH
    from platforms.cpu import compile_cpp

    src = "#include <cstdint>\n#include <cstring>\n" + HALF_BITS + HALF_MATH.replace("KF_HALF_FN", "static inline")
    for t in ("bf16", "f16"):
        src += (f'extern "C" void ld_{t}(const uint16_t* h, float* o, int64_t n) {{\n#pragma omp simd\n'
                f"for (int64_t i = 0; i < n; ++i) o[i] = kf_ld_{t}(h[i]);\n}}\n"
                f'extern "C" void st_{t}(const float* x, uint16_t* o, float* r, int64_t n) {{\n#pragma omp simd\n'
                f"for (int64_t i = 0; i < n; ++i) {{ o[i] = kf_st_{t}(x[i]); r[i] = kf_r{t}(x[i]); }}\n}}\n")
    lib = compile_cpp(src, extra_cflags=("-fno-math-errno", "-fno-trapping-math"))
    bits = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    x = torch.cat([torch.randn(200_000) * 10, torch.randn(50_000) * 1e-5, torch.randn(50_000) * 6e4,
                   torch.randn(20_000) * 1e38, torch.logspace(-45, 38, 100_000),
                   (torch.arange(1 << 16, dtype=torch.int32) << 16 | 0x8000).view(torch.float32),  # bf16 ties
                   torch.tensor([0.0, -0.0, 65504.0, 65519.0, 65520.0, 1e-8, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26,
                                 float("inf"), float("-inf"), float("nan")])])
    x = torch.cat([x, -x]).contiguous()
    for t, dt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        out = torch.empty(1 << 16, dtype=torch.float32)
        getattr(lib, f"ld_{t}")(bits, out, bits.numel())
        want = bits.view(dt).float()
        assert torch.equal(out.isnan(), want.isnan()) and torch.equal(out[~want.isnan()], want[~want.isnan()]), t
        o, r = torch.empty(x.numel(), dtype=torch.int16), torch.empty_like(x)
        getattr(lib, f"st_{t}")(x, o, r, x.numel())
        want = x.to(dt)
        nan = want.isnan()
        assert torch.equal(o.view(dt).isnan(), nan) and torch.equal(r.isnan(), nan), t
        assert torch.equal(o[~nan], want.view(torch.int16)[~nan]), t
        assert torch.equal(r[~nan], want.float()[~nan]), t


def test_half_precision_stays_in_pytorch_where_the_writer_lacks_it(agent):
    """Triton and Metal declare no half dtypes: bf16 nodes stay PyTorch calls with a reason, as before."""
    for target in ("triton", "metal"):
        res = agent.synthesize(ADD_RMSNORM_BF16, target, Schedule(fuse=True), "add_rmsnorm_bf16")
        assert res.program, res.error
        assert "kept in PyTorch: add, float, to, mul" in res.notes, res.notes
        reasons = agent.last_report["kept_reasons"]
        assert reasons["add"] == "output dtype bfloat16 (this target's kernels write float32 and bool)", reasons
        assert "kernels hold float32 only" in reasons["to"], reasons
