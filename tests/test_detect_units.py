"""Unit checks behind the evaluator's detection (issue 21) that need no child process: the native allow-list, the
compiler-log filter, global native state snapshots, the hardware-floor failure, JSON output and bench's minimum
custom-kernel share."""

from __future__ import annotations

import json
import signal
import types

import pytest
import torch

from kforge_core.eval.harness import guards, native


@pytest.mark.parametrize("symbol, kind, allowed", [
    ("expf", "cpp", True), ("__expf_finite", "cpp", True), ("memcpy", "cpp", True), ("__memcpy_chk", "cpp", True),
    ("GOMP_parallel", "cpp", True), ("_Znwm", "cpp", True), ("__cxa_throw", "cpp", True),
    ("__open_2", "cpp", False), ("__read_chk", "cpp", False), ("pwritev", "cpp", False), ("linkat", "cpp", False),
    ("mkstemp", "cpp", False), ("dprintf", "cpp", False), ("_Fork", "cpp", False), ("setsid", "cpp", False),
    ("sigaction", "cpp", False), ("setitimer", "cpp", False), ("timer_create", "cpp", False),
    ("mallopt", "cpp", False), ("syscall", "cpp", False), ("PyErr_Occurred", "cpp", False),
    ("PyErr_Occurred", "load_inline", True), ("PyImport_ImportModule", "load_inline", False),
    ("PyRun_SimpleString", "load_inline", False), ("_ZN2at4_ops10empty_like4callERKNS_6TensorE", "load_inline", True),
    ("_ZN5torch7Library5_implEPKcONS_11CppFunctionENS0_5_RegE", "load_inline", False),
    ("_ZN2at7Context18setAllowTF32CuBLASEb", "load_inline", False),
    ("_ZN2at15set_num_threadsEi", "load_inline", False),
    ("cudaLaunchKernel", "load_inline_cuda", True), ("cudaLaunchKernel", "load_inline", False),
    ("open", "load_inline_cuda", False), ("syscall", "load_inline_cuda", False),
    # what an honest load_inline CUDA build imports on the H100 image (CUDA 12.8 stubs, GCC 13's libstdc++)
    ("__cudaLaunchKernel", "load_inline_cuda", True), ("__cudaGetKernel", "load_inline_cuda", True),
    ("__cudaLaunchKernel", "load_inline", False), ("_ZSt21ios_base_library_initv", "cpp", True),
    ("cudaIpcOpenMemHandle", "load_inline_cuda", False),
    ("cudaStreamCreate", "load_inline_cuda", False), ("cudaStreamCreateWithPriority", "load_inline_cuda", False),
    ("cudaStreamWaitEvent", "load_inline_cuda", True), ("cudaStreamSynchronize", "load_inline_cuda", True),
])
def test_symbol_allow_list(symbol, kind, allowed):
    assert native.symbol_allowed(symbol, kind) is allowed


def _compile_object(tmp_path, name: str, source: str):
    import shutil
    import subprocess

    if not (shutil.which("g++") and shutil.which("nm")):
        pytest.skip("needs g++ and binutils' nm")
    (tmp_path / f"{name}.cpp").write_text(source)
    subprocess.run(["g++", "-c", "-O1", "-o", str(tmp_path / f"{name}.o"), str(tmp_path / f"{name}.cpp")], check=True)
    return tmp_path / f"{name}.o"


def test_objects_may_call_what_their_sibling_objects_define(tmp_path, monkeypatch):
    """A load_inline CUDA build is two objects: main.cpp's wrapper calls the launcher cuda.cu defines (seen on the
    H100: `swish_bias_cuda(at::Tensor, at::Tensor)` was refused as an import). Calls between the build's own objects
    pass; what neither defines is still vetted."""
    monkeypatch.setattr(guards, "violations", [])  # _violate records what it refused
    launcher = _compile_object(tmp_path, "launcher", "float launch_kernel(float x) { return x * 2.0f; }\n")
    wrapper = _compile_object(tmp_path, "wrapper", "float launch_kernel(float);\nfloat run(float x) "
                                                    "{ return launch_kernel(x); }\n")
    native.vet_objects("load_inline", [launcher, wrapper], "load_inline")
    with pytest.raises(guards.GuardViolation, match="launch_kernel"):
        native.vet_objects("load_inline", [wrapper], "load_inline")
    opener = _compile_object(tmp_path, "opener", "#include <fcntl.h>\nint grab() { return open(\"/etc/x\", 0); }\n")
    with pytest.raises(guards.GuardViolation, match="open"):
        native.vet_objects("load_inline", [launcher, wrapper, opener], "load_inline")


def test_compiler_log_hides_text_of_other_files():
    log = ("In file included from kernel.cpp:3:\n"
           "/etc/secret.txt:1:1: error: 'sk_live_123' does not name a type\n"
           "    1 | sk_live_123\n      | ^~~~~~~~~~~\n"
           "kernel.cpp:7:5: error: 'y' was not declared in this scope\n"
           "    7 |     y = 1;\n")
    out = native.sanitize_compiler_log(log, ("kernel.cpp",), ("/usr/include",))
    assert "sk_live_123" not in out
    assert "secret.txt:1: error in a file other than the kernel (text not shown)" in out
    assert "kernel.cpp:7:5: error: 'y' was not declared" in out and "    7 |     y = 1;" in out


def test_depfile_entries_and_include_vetting(tmp_path):
    (tmp_path / "kernel.cpp").write_text("")
    entries = native.depfile_entries("kernel.o: kernel.cpp \\\n /etc/hostname\n")
    assert entries == ["kernel.cpp", "/etc/hostname"]
    native.vet_includes("t", ["kernel.cpp"], {tmp_path / "kernel.cpp"}, tmp_path)  # the kernel alone: fine
    with pytest.raises(guards.GuardViolation, match="not system headers"):
        native.vet_includes("t", entries, {tmp_path / "kernel.cpp"}, tmp_path)
    guards.violations.clear()


def test_dispatcher_replacement_is_seen():
    """A kernel registered for an ATen op the reference uses (what TORCH_LIBRARY_IMPL does from C++) changes the
    dispatcher snapshot."""
    guards.watched_ops.add("aten::abs")
    before = guards.snapshot_state()
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("abs", lambda x: torch.zeros_like(x), "CPU")
        changed = guards.changed_state(before)
    finally:
        lib._destroy()
        guards.watched_ops.discard("aten::abs")
    assert any("aten::abs" in c for c in changed), changed


def test_signal_and_timer_changes_are_seen():
    before = guards.snapshot_state(identities=False)
    previous = signal.signal(signal.SIGALRM, lambda *a: None)  # a timer's signal: could run deferred work
    try:
        assert any("signal dispositions" in c for c in guards.changed_state(before, identities=False))
    finally:
        signal.signal(signal.SIGALRM, previous)
    previous = signal.signal(signal.SIGUSR2, lambda *a: None)  # LLVM's crash handlers (Triton) set it: not watched
    try:
        assert guards.changed_state(before, identities=False) == []
    finally:
        signal.signal(signal.SIGUSR2, previous)
    signal.setitimer(signal.ITIMER_PROF, 100.0)
    try:
        assert "interval timer ITIMER_PROF" in guards.changed_state(before, identities=False)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    assert guards.changed_state(before, identities=False) == []


def test_a_timed_call_below_the_hardware_floor_fails_on_accelerators():
    from kforge_core.eval.harness.run import below_floor

    roof = {"floor_ms": 0.4, "bound": "memory"}
    gpu, cpu = types.SimpleNamespace(device_type="cuda"), types.SimpleNamespace(device_type="cpu")
    assert "below the hardware floor" in below_floor({"min_ms": 0.196}, roof, gpu)
    assert below_floor({"min_ms": 0.39}, roof, gpu) == ""  # within the measurement's margin
    assert below_floor({"min_ms": 0.196}, roof, cpu) == ""  # a shared CPU measures its ceilings low: warning only
    assert below_floor({"min_ms": 0.1}, {"floor_ms": None}, gpu) == ""


def test_json_output_has_no_nan_or_infinity(capsys):
    from kforge_core.cli.common import print_json

    print_json({"status": "incorrect", "max_abs_error": float("nan"), "checks": [{"x": float("-inf")}], "n": 1.5})
    data = json.loads(capsys.readouterr().out, parse_constant=lambda t: pytest.fail(f"{t} in JSON"))
    assert data["max_abs_error"] is None and data["checks"][0]["x"] is None and data["n"] == 1.5
    assert data["non_finite"] == {"max_abs_error": "nan", "checks[0].x": "-inf"}


def test_bench_counts_a_candidate_below_the_custom_share_as_not_faster():
    from kforge_core.bench.metrics import summarize
    from kforge_core.bench.runner import below_share

    decorative = {"problem": "a", "correct": True, "custom_share": 0.05, "speedup_vs_eager": 3.0,
                  "speedup_vs_compiled": 2.0}
    honest = {"problem": "b", "correct": True, "custom_share": 0.9, "speedup_vs_eager": 2.0,
              "speedup_vs_compiled": 1.5}
    judged = [below_share(r, 0.5) for r in (decorative, honest)]
    assert judged[0]["below_custom_share"] and judged[0]["measured_speedup_vs_eager"] == 3.0
    assert judged[1] is honest and below_share(decorative, None) is decorative
    summary = summarize(judged)
    assert summary["fast_p_vs_eager"]["1"] == 0.5 and summary["correct"] == 2


def test_watchdog_report_is_read_as_a_phase_timeout():
    from kforge_core.eval.harness import watchdog

    log = (f"candidate output\n{watchdog.MARK} a checked forward call may take 10 s\nTimeout (0:00:10)!\n"
           f"Thread 0x1 (most recent call first):\n  File \"x.py\", line 3 in forward\n")
    assert "a checked forward call may take 10 s and ran past it" in watchdog.timeout_reason(log)
    assert watchdog.timeout_reason("Timeout (0:00:10)!\n") is None  # no phase of ours was running
    assert watchdog.call_limit_s(0.001) == 10.0 and watchdog.call_limit_s(1.0) == 50.0
