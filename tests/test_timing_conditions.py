"""Timing conditions (issue 22, fidelity): every timed process of an evaluation gets the same thread and allocator
settings, the allocator policy keeps repeated calls off fresh pages, and the verdict states the conditions of each
side. Speed itself is measured by bench/timing_fidelity.py, never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kforge_core.eval import child_setup
from kforge_core.eval.harness import conditions

# Three 8 MiB blocks allocated, touched and freed in reverse order, as eager's temporaries are: with glibc's defaults
# the freed blocks coalesce into a heap top above the (learned) trim threshold, which is given back to the kernel, so
# every round faults part of its 24 MiB in again. Prints the page faults of the rounds after a warm-up.
_ROUNDS = r"""
import ctypes, json, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 8 << 20
def round_():
    blocks = [libc.malloc(size) for _ in range(3)]
    for b in blocks:
        ctypes.memset(b, 1, size)
    for b in reversed(blocks):
        libc.free(b)
for _ in range(3):
    round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    round_()
print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
"""


def _faults(env: dict) -> int:
    out = subprocess.run([sys.executable, "-S", "-c", _ROUNDS], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_allocator_policy_keeps_repeated_blocks_off_fresh_pages(tmp_path):
    """Under the evaluation children's environment, repeated 8 MiB blocks reuse memory already touched (no page
    faults after the warm-up); under glibc's defaults the same rounds fault every time (the eager bimodality)."""
    env = child_setup.child_environment(tmp_path)
    assert _faults(env) < 100  # a page or two of the interpreter's own, never the blocks' 6144 a round
    default = {k: v for k, v in env.items() if not k.startswith("MALLOC_")}
    # the control: without the policy the heap top is trimmed every round (measured: two of the three blocks, 4096
    # pages a round, fault again); at least one block a round
    assert _faults(default) >= 10 * 2048


def test_every_child_gets_the_same_stated_settings(tmp_path, monkeypatch):
    for name in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    env = child_setup.child_environment(tmp_path)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert env["OMP_NUM_THREADS"] == str(child_setup.usable_cores())
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)  # glibc refuses a larger one (and would mmap everything)
    assert int(env["MALLOC_TRIM_THRESHOLD_"]) >= 1 << 40
    assert set(conditions.SETTINGS) <= set(env)  # what the verdict states is what the children are given
    # the same for every child: judge, candidate's process, baseline server and fork server all take this function
    assert child_setup.child_environment(tmp_path / "other", isolated=True)["OMP_NUM_THREADS"] == env["OMP_NUM_THREADS"]


def test_the_callers_own_settings_win(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    env = child_setup.child_environment(tmp_path)
    assert (env["OMP_NUM_THREADS"], env["MALLOC_TRIM_THRESHOLD_"], env["OMP_WAIT_POLICY"]) == ("1", "131072", "ACTIVE")


def _conditions(**over) -> dict:
    return {"threads": 2, "OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE",
            "MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1099511627776", **over}


def test_conditions_that_agree_are_stated_once():
    check, warning = conditions.check({"eager (the judge)": _conditions(), "candidate's process": _conditions()})
    assert warning == ""
    assert check["name"] == "timing conditions" and check["passed"]
    assert check["detail"].startswith("every timed process (eager (the judge), candidate's process): 2 intra-op")
    assert "OMP_WAIT_POLICY=PASSIVE" in check["detail"]


def test_conditions_that_differ_are_a_warning():
    check, warning = conditions.check({"eager (the judge)": _conditions(),
                                       "torch.compile baseline server": _conditions(threads=1, OMP_NUM_THREADS="1")})
    assert "different settings" in warning and "not measured alike" in warning
    assert "torch.compile baseline server: 1 intra-op threads" in check["detail"]


def test_a_missing_or_malformed_report_is_said_not_trusted():
    forged = {"threads": True, "OMP_NUM_THREADS": ["x"], "OMP_WAIT_POLICY": "P" * 500, "extra": "dropped"}
    check, warning = conditions.check({"eager (the judge)": _conditions(), "candidate's process (reported)": forged,
                                       "torch.compile baseline server": None})
    assert "not reported: torch.compile baseline server" in check["detail"]
    assert "None intra-op threads" in check["detail"] and "extra" not in check["detail"]
    assert "P" * 41 not in check["detail"]  # a report's strings are clipped
    assert warning  # a report unlike the judge's conditions is said


def test_read_reports_this_process():
    c = conditions.read()
    assert isinstance(c["threads"], int) and c["threads"] >= 1
    assert set(c) == {"threads", *conditions.SETTINGS}


def test_release_gives_the_heap_back_on_the_cpu():
    """Between phases the judge trims the heap it keeps while a phase runs (a no-op where glibc is absent)."""
    from kforge_core.eval.harness import footprint
    from kforge_core.platform import get_platform

    if sys.platform.startswith("linux"):
        assert footprint._MALLOC_TRIM is not None
    footprint.release(get_platform("cpu"))


def test_environment_policy_is_documented():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "EVALUATOR.md").read_text()
    assert "MALLOC_TRIM_THRESHOLD_" in doc and "OMP_NUM_THREADS" in doc
