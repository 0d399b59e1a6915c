"""Evaluator detection (issue 21): rules that resolve values, native vetting by allow-list, work-based custom-kernel
shares and JSON-safe verdicts, each with a hostile candidate the earlier name- and deny-list checks let through.

Real child processes and a real g++, registered with the shared evalkit batch (two at a time)."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from candidates import variants
from candidates.evalkit import HONEST, HOSTILE, QUICK_TIMING, case

M = __name__
SWISH = "swish_small.py"
_DIR = Path(tempfile.mkdtemp(prefix="kforge-variants-"))
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)
MADE = variants.write(_DIR)  # hostile variants of the honest swish kernel, one inserted line each
LARGE = MADE["swish_large"]


def hostile(name: str, problem: str | Path = SWISH, weight: int = 1, **options) -> str:
    return case(M, f"detect:{name}", problem, MADE.get(name) or HOSTILE / f"{name}.py", weight=weight, **options)


VALUES = sorted(variants.PYTHON)
NATIVE = {"native_sigaction": "sigaction", "native_setitimer": "setitimer", "native_mallopt": "mallopt",
          "native_dprintf": "dprintf"}
for _name in VALUES + sorted(variants.NATIVE):
    hostile(_name)
hostile("inline_library_impl", weight=8)
HANGS = ["native_infinite_loop"]
for _name in HANGS:  # a whole-child limit far beyond the per-call one
    hostile(_name, weight=5, timeout_s=240)
hostile("nan_output")
hostile("trivial_kernel_torch_compute", LARGE, weight=2, **QUICK_TIMING)
case(M, "detect:honest_large", LARGE, HONEST / "swish_newmodel.py", weight=2, **QUICK_TIMING)


def assert_status(v, status: str, *fragments: str):
    assert v.status == status, f"expected {status}, got {v.status}: {v.reason}\n{v.log_tail}"
    for frag in fragments:
        assert frag.lower() in v.reason.lower(), f"{frag!r} not in reason: {v.reason}"


@pytest.mark.parametrize("name", VALUES)
def test_forbidden_modules_and_builtins_under_allowed_names(verdicts, name):
    """torch.os, torch.sys (then a private attribute of what it hands out), torch.builtins.open, dataclasses.sys
    through an alias, torch.cuda.memory_snapshot: what the attribute *is* decides, not its name."""
    v = verdicts[f"detect:{name}"]
    assert v.status == "rejected", (v.status, v.reason)
    assert "[rule resolved-values]" in v.reason or "[rule imports]" in v.reason, v.reason


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_native_imports_outside_the_allow_list(verdicts, name):
    """OS services no deny-list named (sigaction, setitimer, mallopt, dprintf): the kernel's own object may import
    only what kernels need."""
    assert_status(verdicts[f"detect:{name}"], "rejected", NATIVE[name], "native-no-os")


def test_split_string_literal_is_joined(verdicts):
    assert_status(verdicts["detect:native_split_literal"], "rejected", "/proc")


def test_digraph_include_is_refused(verdicts):
    v = verdicts["detect:native_digraph_include"]
    assert_status(v, "rejected", "include")
    assert "hostname" not in (v.compile_log or "") or "text not shown" in v.compile_log


def test_dispatcher_registration_from_an_extension_is_refused(verdicts):
    """TORCH_LIBRARY_IMPL(aten, CPU, ...) replacing abs: refused by the object's imports, before the library loads."""
    assert_status(verdicts["detect:inline_library_impl"], "rejected", "Library", "native-no-os")


def test_nan_verdict_is_strict_json(verdicts, capsys):
    """`evaluate --json` on a NaN output: valid JSON (null plus a readable `non_finite` field), never NaN."""
    from kforge_core.cli.common import print_json

    v = verdicts["detect:nan_output"]
    assert v.status == "incorrect"
    print_json(v.to_dict())
    text = capsys.readouterr().out

    def refuse(token):
        raise AssertionError(f"{token} in JSON output")

    data = json.loads(text, parse_constant=refuse)
    if data["max_abs_error"] is None:
        assert data["non_finite"]["max_abs_error"] in ("nan", "inf")


def test_decorative_kernel_shows_a_low_custom_share_and_aten_compute(verdicts):
    """A one-element kernel beside PyTorch compute passes must-launch; the verdict now says whose work the forward
    is: ATen compute of the reference's kind inside it, and a small share of its time in its own kernels (well
    below an honest kernel's on the same problem)."""
    v = verdicts["detect:trivial_kernel_torch_compute"]
    honest = verdicts["detect:honest_large"]
    assert_status(v, "correct")
    assert_status(honest, "correct")
    assert {"aten::sigmoid", "aten::mul"} <= set(v.aten_compute), v.aten_compute
    assert any("ATen compute of the reference's kind" in w for w in v.warnings), v.warnings
    assert honest.aten_compute == [], honest.aten_compute
    assert v.custom_share is not None and honest.custom_share is not None
    assert v.custom_share < 0.2 < honest.custom_share, (v.custom_share, honest.custom_share)
    assert v.custom_share_detail["timed_calls"] is not None


@pytest.mark.parametrize("name", HANGS)
def test_hung_forward_call_is_a_timeout_within_seconds(verdicts, name):
    """A forward call that never returns (native code holding the GIL, or Python) is a `timeout` once it runs past
    max(10 s, 50x the reference's forward), not at the whole child's limit (240 s here): the build keeps that."""
    v = verdicts[f"detect:{name}"]
    assert_status(v, "timeout", "checked forward call")
    assert v.wall_s < 120, v.wall_s
