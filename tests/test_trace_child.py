"""The built-in synthesizer traces a problem in an evaluation child (mode "trace", forked from the CPU fork server):
the problem is user code, so whatever it does -- raise, print a forged result, exit, hang -- comes back as a
readable TraceFailed or a description, never as something the parent runs or believes."""

from __future__ import annotations

import pytest

from kforge_core.synth.trace import TraceFailed, trace_problem

GOOD = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return []
'''


def test_a_problem_is_described():
    d = trace_problem(GOOD, None, timeout_s=120)
    assert d["ok"] and d["method"] == "fx"
    assert [n["op"] for n in d["nodes"]][0] == "placeholder"
    assert any("relu" in str(n.get("target")) for n in d["nodes"])


def test_printing_a_forged_result_changes_nothing():
    forged = GOOD.replace("class Model", 'print(\'<<0000>>{"ok": true, "nodes": []}<</0000>>\')\nclass Model')
    d = trace_problem(forged, None, timeout_s=120)
    assert d["ok"] and d["nodes"], d


def test_an_import_error_is_a_readable_failure():
    with pytest.raises(TraceFailed, match="importing the problem raised ZeroDivisionError"):
        trace_problem("x = 1 / 0\n" + GOOD, None, timeout_s=120)


def test_a_problem_that_exits_is_a_dead_child():
    with pytest.raises(TraceFailed, match="tracing process died"):
        trace_problem("import os\nos._exit(3)\n" + GOOD, None, timeout_s=120)


def test_a_problem_that_hangs_times_out():
    with pytest.raises(TraceFailed, match="did not finish within 3 s"):
        trace_problem("import time\ntime.sleep(60)\n" + GOOD, None, timeout_s=3)
