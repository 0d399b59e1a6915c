"""The Apple Metal target (platforms/metal.py).

Most of it runs anywhere: registration and availability reasons, the example's static checks, the profile summary
from canned timings, and the candidate's host logic against a fake compile_shader that runs the example's two
kernels with torch ops. What needs a Mac is marked and skips elsewhere. The signature parser, argument checks and
kernel calls are in test_metal_signatures.py; compiler log mapping in test_metal_diagnostics.py.
"""
from __future__ import annotations

import ast
import sys

import pytest
import torch

from kforge_core.errors import CompileError
from kforge_core.eval.harness import launches
from kforge_core.platform import Availability, all_platforms, get_platform
from kforge_core.eval.rules import check_candidate
from platforms import metal
from platforms.metal._profile import CUSTOM_PREFIX, OTHER_ROW, recorder, summarize_mps_profile
from platforms.metal._signatures import parse_kernels
from tests.fakes.metal_runtime import FakeNativeLibrary

HAS_MPS = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
needs_mps = pytest.mark.skipif(not HAS_MPS, reason=metal.MPS_UNAVAILABLE)

PLATFORM = get_platform("metal")
EXAMPLE = PLATFORM.example()


def example_source() -> str:
    return EXAMPLE.candidate.read_text()


def example_kernel_source() -> str:
    tree = ast.parse(example_source())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "SOURCE":
            return node.value.value
    raise AssertionError("the example defines no SOURCE")


# ----------------------------------------------------------------------------------------------- registration

def test_registers_with_declared_attributes():
    assert "metal" in all_platforms()
    p = PLATFORM
    assert p.title == "Apple Metal (MPS)"
    assert p.device_type == "mps"
    assert p.kernel_language == "cpp"  # pygments has no Metal lexer; MSL is C++-based
    assert p.accepts_profiler_screenshots is True
    assert p.has_profiler is True
    assert p.limit_address_space is False
    assert p.module_name == "platforms.metal"
    assert p.candidate_api == ("compile_metal",)


def test_pygments_has_no_metal_lexer_and_cpp_exists():
    pygments_lexers = pytest.importorskip("pygments.lexers")
    from pygments.util import ClassNotFound

    assert pygments_lexers.get_lexer_by_name(PLATFORM.kernel_language)
    with pytest.raises(ClassNotFound):
        pygments_lexers.get_lexer_by_name("metal")


@pytest.mark.skipif(HAS_MPS, reason="this machine has MPS")
def test_unavailable_here_with_a_clear_reason():
    avail = PLATFORM.availability()
    assert avail.ok is False
    if sys.platform != "darwin":
        assert avail.reason.startswith("not macOS")
        assert "macOS 14+" in avail.reason and "Apple silicon" in avail.reason and "2.7" in avail.reason
    assert PLATFORM.device_name()


@pytest.mark.parametrize("facts, ok, needle", [
    (dict(system="linux"), False, "not macOS (this is linux)"),
    (dict(machine="x86_64"), False, "Apple silicon (arm64) only"),
    (dict(mac_version="13.6"), False, "macOS 13.6 is too old"),
    (dict(mps_built=False), False, "built without MPS (torch.backends.mps.is_built() is False)"),
    (dict(torch_version="2.6.0", has_compile_shader=False), False, "upgrade to torch >= 2.7"),
    (dict(torch_version="2.6.0"), False, "upgrade to torch >= 2.7"),
    (dict(mps_available=False), False, "torch.backends.mps.is_available() is False"),
    (dict(), True, "Apple M2 Max (38 GPU cores); macOS 14.5; torch 2.7.1"),
    (dict(torch_version="2.13.0+cpu"), True, "torch 2.13.0+cpu"),
])
def test_availability_reasons(facts, ok, needle):
    base = dict(system="darwin", mac_version="14.5", machine="arm64", torch_version="2.7.1",
                has_compile_shader=True, mps_built=True, mps_available=True, device="Apple M2 Max (38 GPU cores)")
    avail = metal.assess(**{**base, **facts})
    assert avail.ok is ok
    assert needle in avail.reason


def test_compile_metal_without_mps_is_a_clear_compile_error(monkeypatch):
    if HAS_MPS:
        pytest.skip("this machine has MPS")
    monkeypatch.setattr(metal, "_libraries", {})
    with pytest.raises(CompileError, match="cannot compile Metal kernels here: not macOS|cannot compile Metal"):
        metal.compile_metal(example_kernel_source())


# ---------------------------------------------------------------------------------------------------- example

def test_example_files_exist_and_parse():
    for path in (EXAMPLE.problem, EXAMPLE.candidate):
        assert path.is_file(), path
        ast.parse(path.read_text())
    assert "class ModelNew" in example_source()


def test_example_candidate_passes_static_rules():
    assert check_candidate(example_source(), "platforms.metal", PLATFORM.candidate_api) == []


def test_example_problem_matches_the_cpu_example():
    # the same problem on both targets, so a working program for one is a reference for the other
    cpu_problem = EXAMPLE.problem.parent.parent / "cpu" / "problem.py"
    assert EXAMPLE.problem.read_text() == cpu_problem.read_text()


def test_example_kernels_parse():
    kernels = parse_kernels(example_kernel_source())
    assert set(kernels) == {"swish_bias4", "swish_bias"}
    k = kernels["swish_bias4"]
    assert k.n_args == 4 and k.grid_dims == 2
    assert [k.buffers[i].name for i in range(4)] == ["x", "bias", "out", "cols4"]
    assert k.buffers[0].element == ("float", 4, 4)
    assert k.buffers[3].type == "uint" and k.buffers[3].indirection == "&"


def test_other_rules_still_bite_metal_candidates():
    bad = example_source().replace("import torch.nn as nn", "import torch.nn as nn\nimport os")
    assert any(v.rule == "imports" for v in check_candidate(bad, "platforms.metal", PLATFORM.candidate_api))
    private = example_source().replace("from platforms.metal import compile_metal",
                                       "from platforms.metal import compile_metal, _libraries")
    assert check_candidate(private, "platforms.metal", PLATFORM.candidate_api)


# --------------------------------------------------------------------------- caching and the example, simulated

def _swish_bias_impl(vec):
    def impl(x, bias, out, cols, threads):
        gx, gy = threads
        width = 4 if vec else 1
        assert gx * width == bias.numel() and gy * gx * width == x.numel(), "threads must cover the matrix"
        rows = x.view(gy, gx * width)
        out.view(gy, gx * width).copy_(rows / (1.0 + torch.exp(-rows)) + bias)
    return impl


@pytest.fixture
def fake_metal(monkeypatch):
    """compile_shader replaced by a fake whose kernels run the example's math with torch ops on CPU tensors."""
    compiled = []

    def fake_compile(source):
        compiled.append(source)
        return FakeNativeLibrary({"swish_bias4": _swish_bias_impl(True), "swish_bias": _swish_bias_impl(False)})

    monkeypatch.setattr(metal, "_libraries", {})
    monkeypatch.setattr(metal, "_mps_ready", lambda: Availability(True, "fake"))
    monkeypatch.setattr(metal, "DEVICE_TYPE", "cpu")
    monkeypatch.setattr(torch.mps, "compile_shader", fake_compile, raising=False)
    return compiled


def test_compile_metal_caches_by_source_hash(fake_metal):
    before = len(launches.builds)
    a = metal.compile_metal(example_kernel_source())
    b = metal.compile_metal(example_kernel_source())
    assert a is b and len(fake_metal) == 1
    assert [x["cached"] for x in launches.builds[before:]] == [False, True]
    assert a.kernels == ["swish_bias", "swish_bias4"]


def test_unknown_pipeline_is_a_compile_error(monkeypatch):
    monkeypatch.setattr(metal, "_libraries", {})
    monkeypatch.setattr(metal, "_mps_ready", lambda: Availability(True, "fake"))
    monkeypatch.setattr(torch.mps, "compile_shader", lambda s: FakeNativeLibrary({"other": None}), raising=False)
    with pytest.raises(CompileError, match="could not be turned into a pipeline"):
        metal.compile_metal("kernel void k(device float* x, uint i [[thread_position_in_grid]]) {}")


@pytest.mark.parametrize("features", [4096, 1001])
def test_example_candidate_host_logic_with_a_fake_compiler(fake_metal, features):
    from kforge_core.eval.harness.loading import import_file

    problem = import_file(EXAMPLE.problem, "metal_example_problem")
    candidate = import_file(EXAMPLE.candidate, "metal_example_candidate")
    torch.manual_seed(0)
    ref = problem.Model(features)
    new = candidate.ModelNew(features)
    new.load_state_dict(ref.state_dict())
    x = torch.randn(16, features)
    launches.reset()
    with torch.no_grad():
        got, want = new(x), ref(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert launches.snapshot() == {"swish_bias4" if features % 4 == 0 else "swish_bias": 1}


# ------------------------------------------------------------------------------------------------ profiling

def test_profile_summary_from_canned_timings():
    summary = summarize_mps_profile({"swish_bias4": [0.20, 0.22, 0.18, 0.2, 0.2], "pack": [0.05] * 10},
                                    forward_ms=[0.5] * 5, trials=5, device="Apple M2 (10 GPU cores)",
                                    clean_forward_ms=[0.3] * 5, torch_ops={"aten::add": 1.0})
    assert set(summary) >= {"tool", "device", "per_forward_ms", "kernels", "custom_share", "launches_per_forward",
                            "notes"}
    assert summary["per_forward_ms"] == pytest.approx(0.5)
    rows = {r["name"]: r for r in summary["kernels"]}
    assert rows[f"{CUSTOM_PREFIX}swish_bias4"]["calls_per_forward"] == 1
    assert rows[f"{CUSTOM_PREFIX}swish_bias4"]["ms_per_forward"] == pytest.approx(0.2)
    assert rows[f"{CUSTOM_PREFIX}pack"]["calls_per_forward"] == 2
    assert rows[f"{CUSTOM_PREFIX}pack"]["ms_per_forward"] == pytest.approx(0.1)
    assert rows[OTHER_ROW]["ms_per_forward"] == pytest.approx(0.2) and rows[OTHER_ROW]["custom"] is False
    assert summary["custom_share"] == pytest.approx(0.6)
    assert sum(r["share"] for r in summary["kernels"]) == pytest.approx(1.0)
    assert summary["launches_per_forward"] == 3
    assert summary["per_forward_ms_unprofiled"] == pytest.approx(0.3)
    notes = " ".join(summary["notes"])
    assert "slow the forward" in notes and "aten::add x1" in notes
    assert "Instruments" in notes and "torch.mps.event.Event" in notes and "CPU-side" in notes
    assert summary["kernels"][0]["name"] == f"{CUSTOM_PREFIX}swish_bias4"


def test_profile_summary_when_events_exceed_the_forward_and_when_nothing_ran():
    s = summarize_mps_profile({"k": [1.0]}, forward_ms=[0.5], trials=1, device="d", signposts=False)
    assert s["per_forward_ms"] == pytest.approx(1.0) and s["custom_share"] == pytest.approx(1.0)
    assert any("exceed the measured forward" in n for n in s["notes"])
    assert not any("Instruments" in n for n in s["notes"])
    empty = summarize_mps_profile({}, forward_ms=[0.4], trials=1, device="d")
    assert empty["custom_share"] == 0 and empty["kernels"][0]["name"] == OTHER_ROW
    assert any("no kernel built with compile_metal ran" in n for n in empty["notes"])


class FakeEvent:
    """torch.mps.event.Event stand-in on a fake clock: every record() advances it by 0.1 ms."""

    clock = [0.0]

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        FakeEvent.clock[0] += 0.1
        self.t = FakeEvent.clock[0]

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return end.t - self.t


@pytest.fixture
def fake_mps_runtime(monkeypatch, fake_metal):
    import contextlib

    monkeypatch.setattr(torch.mps.event, "Event", FakeEvent)
    monkeypatch.setattr(torch.mps, "synchronize", lambda: None)
    monkeypatch.setattr(torch.mps.profiler, "profile", lambda **kw: contextlib.nullcontext())
    return fake_metal


def test_recorder_times_launches_only_while_recording(fake_mps_runtime):
    from platforms.metal._profile import recording

    pending_before = list(recorder.pending)
    assert recorder.active is False
    assert recorder.launch("k", lambda: 42) == 42
    assert recorder.pending == pending_before  # inactive: nothing recorded
    with recording() as rec:
        assert rec.launch("k", lambda: 7) == 7
        rec.launch("k", lambda: None)
        rec.launch("j", lambda: None)
    assert recorder.active is False
    ms = rec.kernel_ms()
    assert {k: len(v) for k, v in ms.items()} == {"k": 2, "j": 1}
    assert all(v == pytest.approx(0.1) for vs in ms.values() for v in vs)


def test_platform_profile_orchestration_with_fakes(fake_mps_runtime):
    lib = metal.compile_metal(example_kernel_source())
    x, bias, out = torch.randn(8, 16), torch.randn(16), torch.empty(8, 16)

    def forward():
        lib.swish_bias4(x, bias, out, 4, threads=(4, 8), group_size=(4, 8))
        return out + 1  # a PyTorch op the summary should list

    summary = PLATFORM.profile(forward, trials=3)
    rows = {r["name"]: r for r in summary["kernels"]}
    assert rows[f"{CUSTOM_PREFIX}swish_bias4"]["calls_per_forward"] == 1
    assert summary["launches_per_forward"] == 1
    # the fake kernel itself runs torch ops on CPU, so only presence is checked here
    assert any(n.startswith("non-custom PyTorch ops per forward") and "aten::add" in n for n in summary["notes"])
    assert "per_forward_ms_unprofiled" in summary


def test_torch_op_counter_counts_dispatched_ops():
    x = torch.randn(4)
    counts = metal._count_torch_ops(lambda: torch.sigmoid(x) * x + 1)
    assert counts.get("aten::sigmoid") == 1 and counts.get("aten::mul") == 1 and counts.get("aten::add") == 1


# ----------------------------------------------------------------------------------------------- needs a Mac

@needs_mps
def test_mps_compile_and_run_a_kernel():
    lib = metal.compile_metal("""
#include <metal_stdlib>
using namespace metal;
kernel void axpb(device const float* x, device float* out, constant float& a, constant uint& n,
                 uint i [[thread_position_in_grid]]) {
    if (i < n) out[i] = a * x[i] + 1.0f;
}
""")
    x = torch.randn(1000, device="mps")
    out = torch.empty_like(x)
    launches.reset()
    lib.axpb(x, out, 2.0, x.numel(), threads=x.numel(), group_size=256)
    torch.mps.synchronize()
    torch.testing.assert_close(out.cpu(), 2.0 * x.cpu() + 1.0)
    assert launches.snapshot() == {"axpb": 1}
    with pytest.raises(TypeError, match="MPS tensors only"):
        lib.axpb(x.cpu(), out, 2.0, x.numel(), threads=x.numel())


@needs_mps
def test_mps_platform_runtime_pieces():
    p = PLATFORM
    assert p.availability().ok, p.availability().reason
    timer = p.make_timer()
    assert timer.time_ms(lambda: torch.ones(1 << 20, device="mps").sum()) > 0
    p.flush_cache()
    ceilings = p.measure_ceilings()
    assert ceilings["bandwidth_gbs"] > 10 and ceilings["fp32_tflops"] > 0.1 and ceilings["fp16_tflops"] > 0.1


@needs_mps
def test_mps_profile_of_the_example():
    from kforge_core.eval.harness.loading import import_file

    candidate = import_file(EXAMPLE.candidate, "metal_example_candidate_mps")
    model = candidate.ModelNew(4096).to("mps")
    x = torch.randn(512, 4096, device="mps")
    summary = PLATFORM.profile(lambda: model(x))
    names = [r["name"] for r in summary["kernels"]]
    assert f"{CUSTOM_PREFIX}swish_bias4" in names and summary["launches_per_forward"] == 1


@needs_mps
def test_mps_example_end_to_end():
    from kforge_core.eval.evaluator import EvalOptions, evaluate
    from kforge_core.problem import load_problem

    problem = load_problem(EXAMPLE.problem)
    verdict = evaluate(problem, example_source(), "metal", EvalOptions(profile=True))
    assert verdict.status == "correct", (verdict.reason, verdict.compile_log, verdict.log_tail)
    assert verdict.kernel_launches.get("swish_bias4", 0) >= 5
    assert verdict.candidate and verdict.eager
    assert verdict.profile and "error" not in verdict.profile
