"""Honest candidates must pass: the evaluator's defences may not cost a correct kernel its verdict.

Real child processes and a real g++; builds go to the session's private KFORGE_CACHE_DIR (conftest.py).
"""

from __future__ import annotations

import json

import pytest

from candidates.evalkit import HONEST, QUICK_TIMING, case
from kforge_core.platform import get_platform

M = __name__
EXAMPLE = get_platform("cpu").example()

case(M, "example", EXAMPLE.problem, EXAMPLE.candidate, weight=3)
case(M, "example_timed_baselines", "swish_small.py", EXAMPLE.candidate, weight=20,
     **{**QUICK_TIMING, "baselines": True})
case(M, "example_timed", "swish_small.py", EXAMPLE.candidate, weight=2, **QUICK_TIMING)
case(M, "load_inline", "swish_small.py", HONEST / "swish_load_inline.py", weight=40)
case(M, "newmodel", "swish_small.py", HONEST / "swish_newmodel.py")
case(M, "multi_output", "multi_output.py", HONEST / "multi_output.py")
case(M, "scalar_inputs", "scalar_inputs.py", HONEST / "scalar_inputs.py")
case(M, "fp16", "fp16_swish.py", HONEST / "fp16_swish.py")
case(M, "tiny_scale", "tiny_scale.py", HONEST / "tiny_scale.py")
case(M, "lazy_imports", "swish_small.py", HONEST / "lazy_imports.py")
# spawned children only (run by the test itself): the fork server has imported torch._dynamo before any candidate
LAZY_IMPORTS_SPAWNED = case(f"{M}:spawned", "lazy_imports_spawned", "swish_small.py", HONEST / "lazy_imports.py")


def assert_correct(v):
    assert v.status == "correct", f"{v.status}: {v.reason}\n{v.log_tail}"


def test_cpu_example_ctypes_is_correct(verdicts):
    """The platform's own single-shot example (ctypes format, full size) is correct, with launches counted."""
    v = verdicts["example"]
    assert_correct(v)
    assert v.kernel_launches.get("swish_bias", 0) >= 6  # 5 seeds + the in-place rewrite
    assert v.builds and v.builds[0]["platform"] == "cpu"
    assert v.tolerance and v.tolerance["name"] == "default"


def test_example_kernel_in_load_inline_format_is_correct(verdicts):
    """The same kernel in KernelBench's load_inline format (cpp_sources + functions=[...]) is accepted as is."""
    v = verdicts["load_inline"]
    assert_correct(v)
    assert any(k.endswith(".swish_bias") for k in v.kernel_launches), v.kernel_launches
    assert [b["platform"] for b in v.builds] == ["load_inline"]


def test_load_inline_rebuild_comes_from_cache(verdicts):
    """A second evaluation of the same load_inline source reloads the cached extension: its build record says
    `cached` and no compiler ran (the cold build takes tens of seconds; a cache hit only imports the .so)."""
    from candidates.evalkit import REGISTRY, run_case

    first = verdicts["load_inline"]  # the cold build (or a hit, if this cache already had it)
    assert_correct(first)
    second = run_case(REGISTRY["load_inline"])
    assert_correct(second)
    assert [b["cached"] for b in second.builds] == [True], second.builds
    assert second.builds[0]["compiler_ran"] is False
    assert second.builds[0]["seconds"] < 5.0


def test_newmodel_class_name_is_accepted(verdicts):
    """`NewModel` is accepted as well as `ModelNew`."""
    assert_correct(verdicts["newmodel"])


def test_multi_output_problem(verdicts):
    """Every output of a multi-output problem is compared (and both are right here)."""
    v = verdicts["multi_output"]
    assert_correct(v)
    assert sum(c["name"].startswith("seed") and c["passed"] for c in v.checks) == 5, v.checks


def test_scalar_inputs(verdicts):
    """Python scalars in get_inputs() reach the candidate (and the kernel) as numbers."""
    assert_correct(verdicts["scalar_inputs"])


def test_fp16_is_judged_by_half_tolerance(verdicts):
    """A half-precision kernel rounding once (torch rounds after every op) differs by more than the fp32 atol but
    passes the half tolerance; the verdict records the policy it was judged by."""
    v = verdicts["fp16"]
    assert_correct(v)
    assert v.tolerance["half"]["atol"] == pytest.approx(1e-2)
    assert v.max_abs_error is not None and v.max_abs_error <= v.tolerance["half"]["atol"] + 1e-9
    assert v.max_abs_error > v.tolerance["fp32"]["atol"]  # the fp32 tolerance would have failed it


def test_tiny_valued_outputs_pass_when_right(verdicts):
    """The relative-L2 bound that stops zero outputs does not reject an honest kernel with tiny outputs."""
    assert_correct(verdicts["tiny_scale"])


def test_lazy_imports_inside_torch_are_not_candidate_code(verdicts, monkeypatch):
    """A public torch API whose first call imports torch modules lazily: torch.broadcast_shapes (sympy) and
    torch.utils.checkpoint (torch._dynamo, whose top-level code sets os.environ, audit event os.putenv, and rebinds
    torch.manual_seed). That is torch's own import-time code, trusted like any installed library's: correct both in
    a fork-server child (torch._dynamo preloaded) and in a spawned one (KFORGE_EVAL_SPAWN=1, and every platform
    without a fork server), where the imports happen during the candidate's first call."""
    from candidates.evalkit import REGISTRY, run_case

    assert_correct(verdicts["lazy_imports"])
    monkeypatch.setenv("KFORGE_EVAL_SPAWN", "1")
    assert_correct(run_case(REGISTRY[LAZY_IMPORTS_SPAWNED]))


def test_verdict_json_has_speedups_and_tolerance(verdicts):
    """With timing on, the verdict's JSON carries candidate and eager timings, the speedup, the tolerance policy,
    the roofline and the build records."""
    v = verdicts["example_timed"]
    assert_correct(v)
    d = json.loads(json.dumps(v.to_dict()))
    assert d["candidate_ms"] > 0 and d["eager_ms"] > 0
    assert d["speedup_vs_eager"] == pytest.approx(d["eager_ms"] / d["candidate_ms"])
    assert d["compiled"] is None and d["speedup_vs_compiled"] is None  # baselines=False
    assert d["tolerance"]["name"] == "default" and d["tolerance"]["fp32"]["rel_l2_max"] > 0
    assert 3 <= d["candidate"]["trials"] <= 5
    assert d["roofline"] is not None
    assert d["builds"] and "cached" in d["builds"][0]


def test_baselines_are_measured_in_the_same_run(verdicts):
    """With baselines on, eager and torch.compile are timed in the same child run, and the compile time is
    reported separately."""
    v = verdicts["example_timed_baselines"]
    assert_correct(v)
    if v.compiled is None:  # torch.compile may be unavailable; then the verdict must say so
        assert any("torch.compile" in w for w in v.warnings), v.warnings
    else:
        assert v.compiled_ms > 0 and v.torch_compile_s > 0 and v.speedup_vs_compiled > 0
    assert v.eager_ms > 0 and v.speedup_vs_eager > 0
