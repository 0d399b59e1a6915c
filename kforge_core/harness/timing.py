"""Timing protocol: warm-up (of varying length), then interleaved trials over rotating inputs, a cache flush
outside the timed region before every trial, a device-wide synchronize before the end timestamp, and the median.

Candidate, eager reference and torch.compile reference are timed in the same run, interleaved trial by trial so
that drift (thermal, other load) hits all three alike. The timer's clock was bound before candidate import.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass

import torch

from .loading import clone, tensor_bytes


@dataclass
class TimingOptions:
    min_trials: int = 10
    max_trials: int = 100
    budget_s: float = 2.0  # wall time for all timed trials of all models together
    rotating_sets: int = 4  # input sets cycled through; capped so they fit in `rotating_bytes_max`
    rotating_bytes_max: int = 1 << 30


def summarize(samples: list[float]) -> dict:
    return {"median_ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples),
            "trials": len(samples)}


def time_models(models: dict[str, object], make_inputs, platform, timer, opts: TimingOptions,
                rng: random.Random) -> tuple[dict[str, dict], dict[str, object]]:
    """Returns ({name: summary}, {name: (inputs_index, last_output)}) — the last outputs are checked afterwards."""
    first = make_inputs(10_000)
    per_set = max(1, tensor_bytes(first))
    n_sets = max(1, min(opts.rotating_sets, opts.rotating_bytes_max // per_set))
    input_sets = [first] + [make_inputs(10_001 + i) for i in range(n_sets - 1)]

    def call(model, inputs):
        with torch.no_grad():
            return model(*inputs)

    # Warm-up: a varying number of calls so a candidate cannot count its way into "timed" behaviour.
    for name, model in models.items():
        for i in range(rng.randint(3, 7)):
            call(model, input_sets[i % n_sets])
        platform.synchronize()

    samples: dict[str, list[float]] = {name: [] for name in models}
    last: dict[str, object] = {}
    deadline = time.monotonic() + opts.budget_s
    trial = 0
    while trial < opts.max_trials and (trial < opts.min_trials or time.monotonic() < deadline):
        idx = trial % n_sets
        for name, model in models.items():
            inputs = input_sets[idx]
            platform.flush_cache()
            box = []
            samples[name].append(timer.time_ms(lambda: box.append(call(model, inputs))))
            last[name] = (idx, box[0])
        trial += 1
    return {name: summarize(s) for name, s in samples.items()}, {"sets": input_sets, **last}


def compile_baseline(ref_model, example_inputs, platform) -> tuple[object | None, float | None, str | None]:
    """torch.compile the reference; returns (compiled, seconds to compile incl. first call, error)."""
    start = time.perf_counter()
    try:
        compiled = torch.compile(ref_model)
        with torch.no_grad():
            compiled(*clone(example_inputs))
        platform.synchronize()
    except Exception as e:  # noqa: BLE001 - any failure of the baseline is reported, not fatal
        return None, None, f"torch.compile baseline unavailable: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return compiled, time.perf_counter() - start, None
