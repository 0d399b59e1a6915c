"""CUDA target checks that need no GPU: availability reasons, kernel signatures, source and option checks, NVRTC
diagnostics mapped to candidate lines, Nsight Compute CSV parsing, profile summaries. GPU runs: tests/gpu/."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kforge_core.errors import CompileError
from kforge_core.platform import get_platform
from kforge_core.profiling import summarize_torch_profile
from kforge_core.eval.rules import check_candidate
from platforms.cuda import _ncu as ncu
from platforms.cuda import _nvrtc as nv
from platforms.cuda._locate import nvrtc_candidates
from platforms.cuda._signatures import parse_kernels
from platforms.cuda._common import candidate_kernel_names

HERE = Path(__file__).parent
CANDIDATES = HERE / "gpu" / "cases"
DATA = HERE / "gpu" / "data"


def test_registered_with_gpu_attributes():
    p = get_platform("cuda")
    assert p.device_type == "cuda" and p.kernel_language == "cuda"
    assert p.formats == ("nvrtc", "load_inline")
    assert p.candidate_api == ("compile_cuda",) and p.module_name == "platforms.cuda"
    assert p.limit_address_space is False and p.allows_inline_asm is True and p.strict_fp32_controls is True
    assert 0.01 <= p.tiny_problem_ms <= 0.1
    assert p.example().problem.exists() and p.example().candidate.exists()


@pytest.mark.skipif(torch.version.cuda is not None, reason="checks the message of a CPU-only torch build")
def test_availability_explains_cpu_only_torch():
    a = get_platform("cuda").availability()
    assert not a.ok
    assert "torch was built without CUDA" in a.reason
    assert get_platform("cuda").device_name() == "cuda (unavailable)"


@pytest.mark.skipif(torch.version.cuda is not None, reason="checks the message of a CPU-only torch build")
def test_compile_cuda_without_gpu_is_a_clear_compile_error():
    from platforms.cuda import compile_cuda

    with pytest.raises(CompileError, match="torch was built without CUDA"):
        compile_cuda('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }')


def test_source_checks_run_before_any_gpu_work():
    from platforms.cuda import compile_cuda

    with pytest.raises(CompileError, match="no __global__ kernel"):
        compile_cuda("__device__ float f(float x) { return x; }")
    with pytest.raises(CompileError, match="only header names"):
        compile_cuda('#include "/home/me/.netrc"\nextern "C" __global__ void k(float* x) {}')
    with pytest.raises(CompileError, match="not allowed"):
        compile_cuda('extern "C" __global__ void k(float* x) {}', options=("-I/etc",))
    with pytest.raises(CompileError, match="not allowed"):
        compile_cuda('extern "C" __global__ void k(float* x) {}', options=("--pre-include=/etc/passwd",))


def test_allowed_options_and_includes():
    assert nv.check_options(["--use_fast_math", "-DBLOCK=256", "--maxrregcount=64", "-lineinfo", "--std=c++17",
                             "--ptxas-options=-v", "--fmad=false"]) == []
    assert nv.check_source("#include <cuda_fp16.h>\n#include <cstdint>\n#include \"mma.h\"\n") == []
    assert nv.check_source("#include <../../etc/passwd>\n")


def test_parse_kernels_signatures():
    src = r'''
    // comment: __global__ void not_a_kernel(int x)
    extern "C" __global__ void __launch_bounds__(256) add(const float* __restrict__ a, const float* b,
                                                          float* out, int64_t n, float alpha) {}
    __global__ void vec(const float4* x, __half* y, unsigned int n, bool flag) {}
    extern "C" {
    __global__ void in_block(double* d, long long n) {}
    }
    template <int N> __global__ void templ(float* x) {}
    __global__ void bad(float** x) {}
    __global__ void by_struct(MyStruct s) {}
    __device__ float helper(float x) { return x; }
    '''
    k = parse_kernels(src)
    assert set(k) == {"add", "vec", "in_block", "templ", "bad", "by_struct"}
    add = k["add"]
    assert [(p.name, p.base, p.pointer) for p in add.params] == [
        ("a", "float", True), ("b", "float", True), ("out", "float", True), ("n", "int64_t", False),
        ("alpha", "float", False)]
    assert [(p.base, p.pointer) for p in k["vec"].params] == [("float4", True), ("__half", True),
                                                              ("unsigned", False), ("bool", False)]
    assert [p.base for p in k["in_block"].params] == ["double", "long long"]
    assert k["templ"].template and "extern \"C\"" in k["templ"].error
    assert "pointers to pointers" in k["bad"].error
    assert "cannot be passed by value" in k["by_struct"].error


def test_nvrtc_log_maps_to_candidate_lines():
    cand = (CANDIDATES / "cuda_compile_error.py").read_text()
    source = cand.split('r"""', 1)[1].split('"""', 1)[0]
    log = ('kernel.cu(6): error: identifier "undefined_thing" is undefined\n'
           '          out[i] = v / (1.0f + expf(-v)) + bias[i % cols] + undefined_thing;\n'
           '                                                            ^\n\n'
           '1 error detected in the compilation of "kernel.cu".\n')
    err = nv.compile_error_from_log(log, source, cand)
    assert "candidate line 13" in str(err)
    assert "undefined_thing" in str(err)
    assert "candidate line 13 (kernel line 6)" in err.log
    # source not found verbatim in the candidate (built by concatenation): kernel lines are kept, and said so
    err = nv.compile_error_from_log(log, source, "")
    assert "kernel line 6" in str(err)


def test_nvrtc_library_search_is_ordered_and_explicit(monkeypatch):
    monkeypatch.setenv("KFORGE_NVRTC", "/opt/x/libnvrtc.so.99")
    c = nvrtc_candidates()
    assert c[0] == "/opt/x/libnvrtc.so.99"
    assert "libnvrtc.so" in c and not any("builtins" in x for x in c)


def test_example_and_gpu_candidates_pass_static_rules():
    p = get_platform("cuda")
    sources = [p.example().candidate] + sorted(CANDIDATES.glob("cuda_*.py"))
    for path in sources:
        v = check_candidate(path.read_text(), p.module_name, p.candidate_api, allow_inline_asm=p.allows_inline_asm)
        assert v == [], (path.name, v)


def test_candidate_kernel_names():
    text = (CANDIDATES / "cuda_load_inline.py").read_text() + (HERE.parent / "platforms/examples/triton/"
                                                              "candidate.py").read_text()
    assert {"swish_bias_kernel"} <= candidate_kernel_names(text)
    assert "swish_bias_cuda" not in candidate_kernel_names(text)  # a host function, not a kernel


class _Ev:
    """An averaged profiler row (key_averages), and an event of the trace (events): name, device, kernels."""

    def __init__(self, key, count, self_device_us, device_type="DeviceType.CUDA", kernels=()):
        self.key = self.name = key
        self.count = count
        self.self_device_time_total = self_device_us
        self.self_cpu_time_total = 1.0
        self.cpu_time_total = 1.0
        self.device_type = device_type
        self.kernels = [type("KernelInfo", (), {"name": k})() for k in kernels]


class _Prof:
    def __init__(self, events, trace=()):
        self._events, self._trace = events, list(trace)

    def key_averages(self):
        return self._events

    def events(self):
        return self._trace


def test_profile_summary_marks_candidate_kernels_by_name():
    prof = _Prof([_Ev("swish_bias", 5, 500.0), _Ev("void at::native::vectorized_elementwise_kernel<4>", 5, 1500.0),
                  _Ev("cuLaunchKernel", 5, 0.0, "DeviceType.CPU"), _Ev("Memset (Device)", 5, 10.0)])
    s = summarize_torch_profile(prof, 5, tool="t", device="NVIDIA H100", custom_names={"swish_bias", "bias"})
    rows = {r["name"]: r for r in s["kernels"]}
    assert rows["swish_bias"]["custom"] and not rows["void at::native::vectorized_elementwise_kernel<4>"]["custom"]
    assert "cuLaunchKernel" not in rows  # no device time
    assert s["launches_per_forward"] == 1.0
    assert abs(s["custom_share"] - 500 / 2010) < 1e-9
    assert any("not a custom kernel" in n for n in s["notes"])


def test_device_profile_counts_each_kernel_once():
    """torch.profiler gives a PyTorch op that launched a kernel that kernel's time as its own self device time (seen
    on an H200: aten::_softmax and its cunn_SoftMaxForward kernel both 1.569 ms per forward, and 'Activity Buffer
    Request' one kernel's time): only the device's own records count, named after their kernel, with the op."""
    elementwise = "void at::native::vectorized_elementwise_kernel<4, AddFunctor>"
    rows = [_Ev("aten::add", 5, 5000.0, "DeviceType.CPU"), _Ev("Activity Buffer Request", 1, 1000.0, "DeviceType.CPU"),
            _Ev(elementwise, 5, 5000.0), _Ev("kf_k0", 5, 2500.0), _Ev("cuLaunchKernel", 5, 0.0, "DeviceType.CPU")]
    trace = [_Ev("aten::add", 1, 1000.0, "DeviceType.CPU", kernels=[elementwise]),
             _Ev("cudaLaunchKernel", 1, 0.0, "DeviceType.CPU", kernels=[elementwise]),
             _Ev(elementwise, 1, 1000.0)]
    s = summarize_torch_profile(_Prof(rows, trace), 5, tool="t", device="NVIDIA H200", custom_names={"kf_k0"})
    assert [r["name"] for r in s["kernels"]] == [elementwise, "kf_k0"]
    assert s["per_forward_ms"] == pytest.approx(1.5)
    assert s["custom_share"] == pytest.approx(0.5 / 1.5)
    assert s["kernels"][0]["op"] == "aten::add" and "op" not in s["kernels"][1]
    assert s["notes"] == [f"aten::add ({elementwise}) (not a custom kernel) takes 67% of the time"]
    # a CPU profile is host time: its op rows are what it has
    cpu = summarize_torch_profile(_Prof([_Ev("aten::add", 5, 0.0, "DeviceType.CPU")]), 5, tool="t", device="cpu")
    assert [r["name"] for r in cpu["kernels"]] == ["aten::add"]


def test_ncu_numbers_and_units():
    assert ncu.parse_number("1,234.5") == 1234.5
    assert ncu.parse_number("12,345,678") == 12345678
    assert ncu.parse_number("87.31") == 87.31
    assert ncu.parse_number("(256, 1, 1)") == "(256, 1, 1)"
    assert ncu.parse_number("n/a") == "n/a"
    assert ncu.parse_number("1.5e+03") == 1500.0


def test_ncu_csv_parsing_with_canned_report():
    text = (DATA / "ncu_details.csv").read_text()
    kernels = ncu.parse_ncu_csv(text)
    assert kernels, "no kernel parsed"
    k = kernels[0]
    assert "swish_bias" in k["name"]
    h = k["headline"]
    assert "duration" in h and "sm_throughput_pct" in h and "achieved_occupancy_pct" in h
    assert isinstance(h["sm_throughput_pct"], float)
    sol = next(v for s, v in k["metrics"].items() if "Speed Of Light" in s)
    assert all(isinstance(m["value"], (int, float)) for name, m in sol.items() if "Throughput" in name)
    assert k["rules"] and all(r["description"] for r in k["rules"])
    # the real report (Nsight Compute 2025.3 on an H200): NVTX columns, base units, thousands separators
    assert k["grid"] == "(1056, 1, 1)" and k["block"] == "(256, 1, 1)"
    assert sol["DRAM Frequency"]["value"] == 3196770334.93 and sol["Elapsed Cycles"]["value"] == 79023
    assert k["duration_us"] == pytest.approx(40.128)
    assert {r["rule"] for r in k["rules"]} >= {"SOLBottleneck", "AchievedOccupancy"}
    assert any(r.get("speedup") == 22.44 for r in k["rules"])


def test_ncu_command_profiles_only_the_candidate_and_keeps_clocks():
    cmd = ncu.ncu_command("/usr/bin/ncu", {"swish_bias", "helper"}, "/tmp/w", "cuda", None)
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--kernel-name") + 1] == "regex:helper|swish_bias"
    assert cmd[cmd.index("--nvtx-include") + 1] == "kforge_profile/"
    sections = [cmd[i + 1] for i, c in enumerate(cmd) if c == "--section"]
    assert sections == ["SpeedOfLight", "Occupancy", "MemoryWorkloadAnalysis"]
    assert ncu.kernel_regex({"a;rm -rf", "ok"}) == "regex:ok"  # only identifiers reach ncu
    assert "-P" in cmd[cmd.index("-m") - 2:cmd.index("-m")]  # the profiled child keeps its directory off sys.path
