"""The timing protocol's trial counts: a model whose calls take seconds (KernelBench-sized tensors crossing to the
candidate's process) gets fewer warm-ups and trials, still a number it cannot know in advance; a quick one keeps
the full protocol. Run in this process with the CPU platform (the protocol, not a child)."""

from __future__ import annotations

import random
import time

import torch

from kforge_core.eval.harness.timing import TimingOptions, time_models
from kforge_core.platform import Timer, get_platform


class Counting(torch.nn.Module):
    def __init__(self, sleep_s: float):
        super().__init__()
        self.sleep_s, self.calls = sleep_s, 0

    def forward(self, x):
        self.calls += 1
        time.sleep(self.sleep_s)
        return x * 2


def _run(sleep_s: float, seed: int, **opts):
    platform = get_platform("cpu")
    model = Counting(sleep_s)
    summary = time_models({"candidate": model}, lambda s: [torch.full((4,), float(s % 7))], platform,
                          Timer(platform.synchronize), TimingOptions(budget_s=0.0, **opts), random.Random(seed))
    return model.calls, summary["candidate"]["trials"]


def test_quick_calls_keep_the_full_protocol():
    for seed in range(5):
        calls, trials = _run(0.0, seed)
        assert trials == 10 and 1 + 10 <= calls <= 3 + 10


def test_heavy_calls_get_fewer_warmups_and_trials():
    counts = set()
    for seed in range(12):
        calls, trials = _run(0.02, seed, heavy_call_s=0.01)
        assert trials == 5
        warmups = calls - trials
        assert 1 <= warmups <= 4  # the first call, then at most 2..4 in all
        counts.add(warmups)
    assert len(counts) > 1  # the warm-up count still varies from one evaluation to the next


def test_heavy_floor_never_raises_a_lower_minimum():
    calls, trials = _run(0.02, 0, heavy_call_s=0.01, min_trials=3)
    assert trials == 3


def test_cpu_evaluations_take_the_cpu_defaults_and_the_request_wins():
    """On the CPU the budget is 1 s, elsewhere 2 s; the warm-up is 1-3 calls a model everywhere (the checked seeds
    ran both sides already); what a request sets overrides either."""
    from kforge_core.eval.harness.timing import CPU_DEFAULTS, options_for

    cpu, gpu = options_for("cpu"), options_for("cuda")
    assert CPU_DEFAULTS == {"budget_s": 1.0} and cpu.budget_s == 1.0 and gpu.budget_s == TimingOptions().budget_s == 2.0
    assert (cpu.warmup_min, cpu.warmup_max) == (gpu.warmup_min, gpu.warmup_max) == (1, 3)
    assert options_for("cpu", {"budget_s": 3.0}).budget_s == 3.0
    assert options_for("cuda", {"warmup_min": 3, "warmup_max": 7}).warmup_max == 7
    seen = set()
    for seed in range(20):
        calls, trials = _run(0.0, seed, warmup_min=3, warmup_max=7)
        assert trials == 10 and 3 <= calls - trials <= 7
        seen.add(calls - trials)
    assert len(seen) > 1  # still a number the candidate cannot know


def test_slow_trials_lower_the_minimum_to_fit_the_budget():
    """Trials slow for the inputs around a quick call (268 MB made, fingerprinted and checked each trial: ten took
    11 s against a 1 s budget on the 2-core box) keep the minimum within four budgets, never under 5 trials; quick
    ones keep the full minimum of 10."""
    platform = get_platform("cpu")

    def slow_inputs(seed):
        time.sleep(0.1)
        return [torch.full((4,), float(seed % 7))]

    model = Counting(0.0)
    summary = time_models({"candidate": model}, slow_inputs, platform, Timer(platform.synchronize),
                          TimingOptions(budget_s=0.1), random.Random(0))
    assert summary["candidate"]["trials"] == 5  # 4 budgets fit 4 trials of 0.1 s: the floor of 5 holds
    summary = time_models({"candidate": model}, slow_inputs, platform, Timer(platform.synchronize),
                          TimingOptions(budget_s=0.1, min_trials=3), random.Random(0))
    assert summary["candidate"]["trials"] == 3  # never more than asked
    _, trials = _run(0.0, 0)
    assert trials == 10
