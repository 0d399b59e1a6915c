"""GPU tests of the CUDA and Triton targets: NVRTC in process, then full evaluations (one child per candidate) of
honest and hostile candidates. Skipped without an NVIDIA GPU. Run them with `scripts/gpu_check.sh` on a GPU machine;
results that are worth keeping (timings, profiles, the raw ncu report) are written under $OUT when it is set."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs an NVIDIA GPU: torch.cuda.is_available() is False (CPU-only torch or no GPU); run "
           "scripts/gpu_check.sh on a GPU machine")]

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = Path(__file__).parent / "cases"
EXAMPLES = REPO / "platforms" / "examples"
OUT = Path(os.environ["OUT"]) if os.environ.get("OUT") else None


def _save(name: str, data) -> None:
    """Merge `data` under `name` into $OUT/gpu_results.json (the device tool returns a few files only)."""
    if OUT is None:
        return
    path = OUT / "gpu_results.json"
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        results = {}
    results[name] = data
    path.write_text(json.dumps(results, indent=1, default=str))


def _problem(path: Path):
    from kforge_core.problem import Problem

    return Problem(path.stem, path.read_text(), path)


def _evaluate(problem: Path, candidate: Path | str, target: str, **opts):
    from kforge_core.eval.evaluator import EvalOptions, evaluate

    source = candidate.read_text() if isinstance(candidate, Path) else candidate
    opts.setdefault("baselines", False)
    opts.setdefault("timeout_s", 240)
    t0 = time.perf_counter()
    v = evaluate(_problem(problem), source, target, EvalOptions(**opts))
    v.wall_s = time.perf_counter() - t0
    return v


SWISH = EXAMPLES / "cuda" / "problem.py"
ODD = CANDIDATES / "problem_odd.py"
MATMUL = CANDIDATES / "problem_matmul.py"


# --------------------------------------------------------------------------------------------------------------
# NVRTC in this process

ADD = r"""
#include <cstdint>
#include <cmath>
#include <cuda_fp16.h>
extern "C" __global__ void axpb(const float* x, float* out, int64_t n, float a, float b) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = std::fma(a, x[i], b);
}
extern "C" __global__ void to_half(const float* x, __half* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2half(x[i]);
}
__global__ void not_extern_c(float4* out, int n4) {  // C++ linkage: found through NVRTC's lowered names
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) out[i] = make_float4(1.f, 2.f, 3.f, 4.f);
}
"""


def test_nvrtc_compile_launch_cache_and_validation():
    from kforge_core.errors import CompileError
    from platforms.cuda import compile_cuda

    tag = uuid.uuid4().hex
    src = ADD + f"// {tag}\n"
    t0 = time.perf_counter()
    mod = compile_cuda(src)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    mod2 = compile_cuda(src)
    cached = time.perf_counter() - t0
    assert not mod.cached and mod2.cached
    x = torch.randn(10_000, device="cuda")
    out = torch.empty_like(x)
    mod.axpb(grid=((x.numel() + 255) // 256,), block=(256,), args=(x, out, x.numel(), 2.0, 0.5))
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x + 0.5)
    h = torch.empty(x.numel(), device="cuda", dtype=torch.float16)
    mod.to_half(grid=(40,), block=(256,), args=(x, h, x.numel()))
    o4 = torch.empty(4096, device="cuda")
    mod.not_extern_c(grid=(4,), block=(256,), args=(o4, 1024))
    torch.cuda.synchronize()
    torch.testing.assert_close(h, x.half())
    assert o4.view(-1, 4)[:, 3].eq(4).all()
    info = mod.info()
    assert info["target"].startswith("sm_") and info["kernels"]["axpb"]["num_regs"] > 0

    # argument checks: each a clear TypeError/ValueError before anything reaches the GPU
    with pytest.raises(TypeError, match="dtype torch.float64"):
        mod.axpb(grid=1, block=32, args=(x.double(), out, 1, 1.0, 0.0))
    with pytest.raises(TypeError, match="on cpu"):
        mod.axpb(grid=1, block=32, args=(x.cpu(), out, 1, 1.0, 0.0))
    with pytest.raises(TypeError, match="not contiguous"):
        mod.axpb(grid=1, block=32, args=(x.view(100, 100).t(), out, 1, 1.0, 0.0))
    with pytest.raises(TypeError, match="takes 5 arguments"):
        mod.axpb(grid=1, block=32, args=(x, out))
    with pytest.raises(TypeError, match="16-byte alignment"):
        mod.not_extern_c(grid=1, block=32, args=(o4[1:], 1))
    with pytest.raises(OverflowError, match="does not fit"):
        mod.to_half(grid=1, block=32, args=(x, h, 2 ** 40))
    with pytest.raises(ValueError, match="at least 1"):
        mod.axpb(grid=0, block=32, args=(x, out, 0, 1.0, 0.0))
    with pytest.raises(AttributeError, match="found: axpb, not_extern_c, to_half"):
        mod.nope  # noqa: B018

    # a real NVRTC error, mapped to the candidate's line
    from kforge_core.eval.harness import context

    bad_src = "\nextern \"C\" __global__ void k(float* x) {\n    x[0] = undefined_name;\n}\n"
    context.candidate_text = f"import torch\nSOURCE = r\"\"\"{bad_src}\"\"\"\n"
    try:
        with pytest.raises(CompileError) as e:
            compile_cuda(bad_src)
    finally:
        context.candidate_text = ""
    assert "candidate line 4" in str(e.value) and "undefined_name" in str(e.value)

    # compile time of a typical small kernel (no heavy headers), cold
    simple = "extern \"C\" __global__ void s(const float* x, float* o, int n) { int i = blockIdx.x * blockDim.x + " \
             "threadIdx.x; if (i < n) o[i] = x[i] * 2.0f; }\n"
    colds = []
    for _ in range(5):
        t0 = time.perf_counter()
        compile_cuda(simple + f"// {uuid.uuid4().hex}\n")
        colds.append(time.perf_counter() - t0)
    from platforms.cuda._binding import api

    a = api()
    _save("nvrtc_compile.json", {"with_cuda_fp16_cold_s": cold, "cached_s": cached, "simple_cold_s": colds,
                                 "nvrtc": a.nvrtc_path, "nvrtc_version": a.nvrtc_version,
                                 "driver_version": a.driver_version, "supported_archs": a.supported_archs})
    print(f"NVRTC {a.nvrtc_version} ({a.nvrtc_path}): cold with cuda_fp16.h {cold:.3f} s, cached {cached:.4f} s, "
          f"simple cold {sorted(colds)[2]:.3f} s (median of 5)")


def test_measure_ceilings():
    from kforge_core.platform import get_platform

    c = get_platform("cuda").measure_ceilings()
    _save("ceilings.json", {"device": get_platform("cuda").device_name(), **c})
    print("ceilings:", c)
    assert c["bandwidth_gbs"] > 300 and c["bf16_tflops"] > 50 and c["fp32_tflops"] > 5
    assert c["bf16_tflops"] > 3 * c["fp32_tflops"]  # fp32 measured with TF32 off


# --------------------------------------------------------------------------------------------------------------
# Full evaluations: honest candidates


def test_nvrtc_example_correct_with_both_baselines_and_strict_fp32():
    v = _evaluate(SWISH, EXAMPLES / "cuda" / "candidate.py", "cuda", baselines=True)
    _save("verdict_cuda_example.json", v.to_dict())
    assert v.status == "correct", (v.reason, v.log_tail)
    assert v.candidate and v.eager and v.compiled, "candidate, eager and torch.compile timed in the same child"
    assert v.kernel_launches.get("swish_bias", 0) >= 6
    assert v.roofline and v.roofline.get("bandwidth_gbs")
    assert not any("torch.compile baseline unavailable" in w for w in v.warnings), v.warnings
    # no speed assertion: the timer brackets whole forward calls (host overhead included, see _cuda_common)
    print(f"example: candidate {v.candidate.median_ms:.3f} ms, eager {v.eager.median_ms:.3f} ms, torch.compile "
          f"{v.compiled.median_ms:.3f} ms (compiled in {v.torch_compile_s:.1f} s)")


def test_cuda_compiled_baseline_built_once_per_run_with_stages():
    """Issue 22 on the GPU: the run's torch.compile baseline is built by one warm server and timed, trial by trial,
    next to each evaluation; the later evaluations neither build nor wait for it."""
    from kforge_core.eval import baselines
    from kforge_core.eval.evaluator import EvalOptions, evaluate

    baselines.close_all()
    before = baselines.stats["started"]
    source = (EXAMPLES / "cuda" / "candidate.py").read_text()
    runs = []
    for _ in range(3):
        stages: list = []
        t0 = time.perf_counter()
        v = evaluate(_problem(SWISH), source, "cuda", EvalOptions(timeout_s=240), on_stage=stages.append)
        runs.append((time.perf_counter() - t0, v, [s["stage"] for s in stages]))
    _save("shared_baseline_cuda.json", [{"wall_s": w, "stages": st, "compiled": v.to_dict()["compiled"],
                                         "baseline": v.baseline, "warnings": v.warnings} for w, v, st in runs])
    assert baselines.stats["started"] - before == 1
    for wall, v, stages in runs:
        assert v.status == "correct", (v.reason, v.log_tail)
        assert v.baseline and v.compiled and v.compiled.trials == v.candidate.trials, v.warnings
        print(f"shared baseline: {wall:.2f} s to verdict, stages {stages}")
    # the first evaluation started the build and, if it was still under way at its timing phase, waited there; no
    # evaluation compiled the baseline in its own child, and the later ones found it built
    assert all("building the torch.compile baseline" not in st for _, _, st in runs)
    assert all(not any(s.startswith("waiting for the torch.compile baseline") for s in st) for _, _, st in runs[1:])
    baselines.close_all()


def test_triton_example_correct():
    v = _evaluate(EXAMPLES / "triton" / "problem.py", EXAMPLES / "triton" / "candidate.py", "triton")
    assert v.status == "correct", (v.reason, v.log_tail)
    assert v.kernel_launches.get("swish_bias_kernel", 0) >= 6


def test_load_inline_cuda_correct_then_cached():
    # a fresh name keeps this independent of earlier runs' caches
    src = (CANDIDATES / "cuda_load_inline.py").read_text().replace(
        "#include <cuda_runtime.h>", f"#include <cuda_runtime.h>\n// {uuid.uuid4().hex}")
    cold = _evaluate(SWISH, src, "cuda", timing=False)
    assert cold.status == "correct", (cold.reason, cold.log_tail)
    warm = _evaluate(SWISH, src, "cuda", timing=False)
    assert warm.status == "correct", (warm.reason, warm.log_tail)
    _save("load_inline.json", {"cold_wall_s": cold.wall_s, "cold_build_s": cold.build_s,
                               "cached_wall_s": warm.wall_s, "cached_build_s": warm.build_s})
    print(f"load_inline: cold {cold.wall_s:.1f} s (build {cold.build_s:.1f} s), cached {warm.wall_s:.2f} s "
          f"(build {warm.build_s:.3f} s)")
    assert warm.build_s < 2.0 < cold.build_s
    assert any(k.endswith("swish_bias_cuda") for k in warm.kernel_launches)


def test_triton_ieee_matmul_passes_strict_fp32():
    src = (CANDIDATES / "triton_matmul.py").read_text().replace('PRECISION = "tf32"', 'PRECISION = "ieee"')
    v = _evaluate(MATMUL, src, "triton", timing=False)
    assert v.status == "correct", (v.reason, v.log_tail)


# --------------------------------------------------------------------------------------------------------------
# Hostile candidates

HOSTILE = [
    ("cuda_stale_output.py", SWISH, "cuda", "incorrect", r"NaN|nan|mismatch|differ|outside atol"),
    ("cuda_cache_by_pointer.py", SWISH, "cuda", "incorrect", r""),
    ("cuda_unwritten_tail.py", ODD, "cuda", "incorrect", r""),
    ("cuda_pure_torch.py", SWISH, "cuda", "rejected", r"must-launch"),
    ("cuda_compile_error.py", SWISH, "cuda", "compile_error", r"candidate line 13\b.*undefined_thing"),
    ("triton_compile_error.py", SWISH, "triton", "compile_error", r"candidate line 16\b.*not_defined_anywhere"),
    ("triton_matmul.py", MATMUL, "triton", "incorrect", r""),  # TF32 tl.dot vs a strict-fp32 reference
]


@pytest.mark.parametrize("name,problem,target,status,pattern", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_candidates(name, problem, target, status, pattern):
    v = _evaluate(problem, CANDIDATES / name, target, timing=False)
    print(f"{name}: {v.status}: {v.reason[:300]}")
    assert v.status == status, (v.status, v.reason, v.log_tail)
    assert re.search(pattern, v.reason, re.S), v.reason


def test_illegal_address_then_next_candidate_fine():
    v = _evaluate(SWISH, CANDIDATES / "cuda_illegal_address.py", "cuda", timing=False)
    print("illegal address:", v.status, v.reason[:300])
    assert v.status == "runtime_error", (v.reason, v.log_tail)
    assert re.search(r"illegal memory access|ILLEGAL_ADDRESS", v.reason + v.log_tail)
    ok = _evaluate(SWISH, EXAMPLES / "cuda" / "candidate.py", "cuda", timing=False)
    assert ok.status == "correct", (ok.reason, ok.log_tail)


def test_infinite_loop_times_out_then_next_candidate_fine():
    v = _evaluate(SWISH, CANDIDATES / "cuda_infinite_loop.py", "cuda", timing=False, timeout_s=30)
    print("infinite loop:", v.status, f"{v.wall_s:.1f} s", v.reason[:200])
    assert v.status == "timeout"
    t0 = time.perf_counter()
    ok = _evaluate(SWISH, EXAMPLES / "cuda" / "candidate.py", "cuda", timing=False)
    assert ok.status == "correct", (ok.reason, ok.log_tail)
    print(f"next evaluation after the kill: {time.perf_counter() - t0:.1f} s")


def test_side_stream_work_is_inside_the_timing():
    v = _evaluate(SWISH, CANDIDATES / "cuda_side_stream.py", "cuda")
    assert v.status == "correct", (v.reason, v.log_tail)
    print(f"side stream: candidate {v.candidate.median_ms:.3f} ms vs eager {v.eager.median_ms:.3f} ms")
    assert v.candidate.median_ms > 2.0, "the ~3 ms of side-stream work must be measured"
    assert any("left work running on another stream" in w for w in v.warnings), v.warnings


def test_side_stream_work_started_before_the_timers_start_is_timed():
    """Work on a side stream that does not wait for the current one could run during the device timer's lead-in,
    before its start event: every pool stream waits for the start, so it is measured."""
    v = _evaluate(SWISH, CANDIDATES / "cuda_side_stream_early.py", "cuda")
    assert v.status == "correct", (v.reason, v.log_tail)
    print(f"early side stream: candidate {v.candidate.median_ms:.3f} ms vs eager {v.eager.median_ms:.3f} ms")
    assert v.candidate.median_ms > 2.0, "the ~3 ms of side-stream work must be measured"
    assert not any("left work running" in w for w in v.warnings), v.warnings  # it joined its stream back


def test_profile_torch_profiler_and_ncu(monkeypatch):
    import shutil

    monkeypatch.setenv("KFORGE_NCU_KEEP_RAW", "1")
    v = _evaluate(SWISH, EXAMPLES / "cuda" / "candidate.py", "cuda", profile=True, timeout_s=400)
    assert v.status == "correct", (v.reason, v.log_tail)
    p = v.profile
    raw = p.get("ncu", {}).pop("raw", None) if isinstance(p.get("ncu"), dict) else None
    if raw and OUT is not None:
        (OUT / "ncu_raw.csv").write_text(raw)
    _save("profile_cuda_example.json", p)
    assert "error" not in p, p
    custom = [k for k in p["kernels"] if k["custom"]]
    assert custom and custom[0]["name"] == "swish_bias", p["kernels"]
    assert p["launches_per_forward"] == 1.0
    if shutil.which("ncu"):
        n = p["ncu"]
        assert "none" in n["clock_control"]
        assert n.get("kernels"), n
        k = n["kernels"][0]
        assert "swish_bias" in k["name"] and "duration" in k["headline"], k
        print("ncu headline:", k["headline"], "rules:", [r["rule"] for r in k["rules"]])


def test_profile_counts_each_kernel_once_and_gives_the_device_share():
    """A custom kernel, then a PyTorch copy of its output: the profile holds one row per device kernel (the copy
    named after its kernel, with its op), the per-forward time is their sum, and the roofline gets the kernels'
    device-time share of the floor next to the timed call's."""
    source = (EXAMPLES / "cuda" / "candidate.py").read_text()
    assert "        return out\n" in source
    source = source.replace("        return out\n", "        return out.clone()\n")
    v = _evaluate(SWISH, source, "cuda", profile=True, timeout_s=400)
    assert v.status == "correct", (v.reason, v.log_tail)
    p, r = v.profile, v.roofline
    _save("profile_mixed.json", {"profile": p, "roofline": r})
    names = [k["name"] for k in p["kernels"]]
    assert not any(n.startswith(("aten::", "Activity", "cuda", "cuLaunch")) for n in names), names
    assert sum(k["ms_per_forward"] for k in p["kernels"]) == pytest.approx(p["per_forward_ms"], rel=1e-6)
    assert [k["name"] for k in p["kernels"] if k["custom"]] == ["swish_bias"]
    assert 0.35 < p["custom_share"] < 0.65, p  # two passes of the same bytes each; counted twice, the copy had 2/3
    assert any(k.get("op", "").startswith("aten::") for k in p["kernels"] if not k["custom"]), p["kernels"]
    assert r["device_ms"] == pytest.approx(p["per_forward_ms"])
    assert r["device_ms"] < v.candidate.median_ms  # the timed call adds host launch work and the synchronize
    assert r["pct_of_roofline_device"] > r["pct_of_roofline"], r
    print(f"mixed: timed {v.candidate.median_ms:.3f} ms ({r['pct_of_roofline']:.0f}% of the floor), kernels "
          f"{r['device_ms']:.3f} ms ({r['pct_of_roofline_device']:.0f}%)")


def test_triton_profile_marks_triton_kernels():
    v = _evaluate(EXAMPLES / "triton" / "problem.py", EXAMPLES / "triton" / "candidate.py", "triton", profile=True,
                  timeout_s=400)
    assert v.status == "correct", (v.reason, v.log_tail)
    _save("profile_triton_example.json", v.profile)
    assert any(k["custom"] and "swish_bias_kernel" in k["name"] for k in v.profile["kernels"]), v.profile
