"""Nsight Compute runs only for an analysis that reads it: a run's evaluations ask for the vendor profiler when its
analysis agent reads those metrics (an LLM's prompt carries them), not for the built-in analysis, whose rules read
torch.profiler's kernel times; and the CUDA platform's adapter skips ncu when the evaluation said so. It cost about
10 s of every profiled evaluation at KernelBench's sizes (two thirds of a built-in run on an H200)."""

from __future__ import annotations

import os
import stat

from loop_fixtures import ScriptedAgent, offline_config, scripted_evaluate

from kforge_core.agents.builtin_analysis import BuiltinAnalysisAgent
from kforge_core.agents.llm_analysis import LLMAnalysisAgent
from kforge_core.loop.engine import Synthesis
from kforge_core.loop.types import FUNCTIONAL, OPTIMIZATION


def _options(analyzer):
    loop = Synthesis(offline_config(), ScriptedAgent([]), analyzer, evaluate_fn=scripted_evaluate)
    return loop._eval_options(FUNCTIONAL), loop._eval_options(OPTIMIZATION)


def test_builtin_analysis_runs_no_device_profiler():
    for options in _options(BuiltinAnalysisAgent()):
        assert options.profile is True and options.device_profiler is False, options


def test_an_analysis_that_reads_it_or_does_not_say_gets_it():
    assert LLMAnalysisAgent.reads_device_profiler is True
    for options in _options(ScriptedAgent([])):  # an agent without the attribute: as before, profiled in full
        assert options.device_profiler is True, options


def test_ncu_adapter_skips_ncu_when_the_evaluation_says_so(tmp_path, monkeypatch):
    from kforge_core.eval.harness import context
    from platforms.cuda._ncu import ncu_profile

    marker = tmp_path / "ncu_ran"
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ntouch {marker}\necho 'NVIDIA (R) Nsight Compute 0'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("KFORGE_NCU", raising=False)
    (tmp_path / "candidate.py").write_text("")
    monkeypatch.setattr(context, "candidate_path", tmp_path / "candidate.py")
    assert ncu_profile("cuda", {"k"}, {"device_profiler": False}) is None
    assert not marker.exists()
    assert ncu_profile("cuda", {"k"}, {"device_profiler": True}) is not None  # ran (and found nothing to parse)
    assert marker.exists()
