"""The problem's side of an evaluation, in the judge (or the one-process harness): load the reference Model and
its inputs, and check the reference itself before any candidate is judged against it — deterministic (within the
tolerance), finite, dependent on its inputs, and small enough to evaluate (`footprint`)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch

from . import context, footprint, guards, watchdog
from .compare import all_finite, compare_outputs, describe, fingerprint, flatten, tensors_equal
from .correctness import held_elsewhere
from .loading import check_inputs, clone, import_file, size_overrides, tensor_bytes, to_device

class ProblemFailure(Exception):
    pass


def _seeded(platform, seed: int, fn):
    platform.seed(seed)
    random.seed(seed)
    return fn()


def _make_inputs_on(get_inputs, platform, seed: int, device, on_device: list[bool]):
    """get_inputs() with the accelerator as the default device, so `torch.randn(...)` lands there directly.

    At the gallery's GPU sizes a CPU-first input costs seconds of host RNG and a copy per trial, and more host memory
    than the evaluation's limit. A problem whose get_inputs cannot run that way (a CPU generator, numpy) falls back to
    the CPU for the rest of the evaluation, so every seed is made the same way and the inputs stay reproducible.
    """
    if on_device[0]:
        try:
            with torch.device(device):
                return _seeded(platform, seed, get_inputs)
        except Exception:  # noqa: BLE001 - retried on the CPU; a real failure raises there too
            on_device[0] = False
    return _seeded(platform, seed, get_inputs)


def _load_reference(request: dict, workdir: Path, platform):
    try:
        module = import_file(workdir / "problem.py", "kforge_problem")
        for key, value in size_overrides(module, request.get("size_class")).items():
            setattr(module, key, value)  # get_inputs/get_init_inputs read these globals at call time
    except Exception as e:  # noqa: BLE001
        raise ProblemFailure(f"importing the problem raised {type(e).__name__}: {e}") from e
    device = platform.device()

    on_device = [device.type != "cpu"]

    def make_inputs(seed: int):
        try:
            inputs = _make_inputs_on(module.get_inputs, platform, seed, device, on_device)
            check_inputs(inputs)
            return to_device(list(inputs), device)
        except Exception as e:  # noqa: BLE001
            if footprint.out_of_memory(e):
                raise ProblemFailure(footprint.ran_out("making its inputs", e, platform)) from e
            raise ProblemFailure(f"get_inputs() failed: {type(e).__name__}: {e}") from e

    try:
        init = _seeded(platform, 0, module.get_init_inputs)
        if not isinstance(init, (list, tuple)):
            raise TypeError(f"get_init_inputs() must return a list, got {type(init).__name__}")
        ref_model = _seeded(platform, 0, lambda: module.Model(*init)).to(device)
    except Exception as e:  # noqa: BLE001
        raise ProblemFailure(f"building Model failed: {type(e).__name__}: {e}") from e
    return module, list(init), ref_model, make_inputs


REFERENCE_RNG_SEED = 12345  # the reference's checks run right after this seed (the same one before both runs)


def _rng_state(platform) -> list:
    states = [torch.get_rng_state()]
    if platform.device_type == "cuda" and torch.cuda.is_available():
        states.append(torch.cuda.get_rng_state())
    return states


def _private(out):
    """`out`, or a copy where any output's memory is held elsewhere too (an internal buffer of the model the next
    call may write again): no copy of the outputs unless one is needed."""
    for t in flatten(out):
        if isinstance(t, torch.Tensor) and held_elsewhere(t):
            return clone(out)
    return out


def _reference_checks(ref_model, make_inputs, platform, policy, memory) -> tuple[list[str], dict, bool]:
    """Determinism and input dependence of the reference, and whether an evaluation of the problem fits in memory
    (`memory.sizes` are filled in). Returns (warnings, the problem's description, whether the reference draws random
    numbers). Holds at most the inputs twice and the output once (the first call, on a copy), or the inputs once and
    the outputs twice (the second, on the inputs themselves: only their shapes are read after it)."""
    warnings = []
    inputs = make_inputs(0)
    memory.sizes.inputs = tensor_bytes(inputs)
    memory.sizes.params = footprint.model_bytes(ref_model)

    rng_used = []

    def call(x):
        platform.seed(REFERENCE_RNG_SEED)
        before = _rng_state(platform)
        with torch.no_grad():
            out = ref_model(*x)
        platform.synchronize()
        rng_used.append(any(not torch.equal(a, b) for a, b in zip(before, _rng_state(platform))))
        return out

    try:
        x = clone(inputs)
        footprint.reset_peak(platform)
        try:
            out_a = call(x)
        except Exception as e:  # noqa: BLE001
            if not footprint.out_of_memory(e):
                raise
            sizes = memory.sizes
            raise ProblemFailure(footprint.ran_out(
                f"the reference's first forward (inputs {sizes.inputs / footprint.GiB:.3g} GiB, parameters "
                f"{sizes.params / footprint.GiB:.3g} GiB)", e, platform)) from e
        memory.sizes.outputs = tensor_bytes(out_a)
        memory.sizes.work = max(0, footprint.peak(platform) - footprint.current(platform))
        del x
        too_big = footprint.does_not_fit(memory.sizes, platform, footprint.current(platform))
        if too_big:
            raise ProblemFailure(too_big)
        out_a = _private(out_a)
        start = time.perf_counter()
        out_b = call(inputs)  # no copy: at KernelBench's sizes a third problem-sized tensor at this peak (6-8 GiB)
        context.call_limit_s = watchdog.call_limit_s(time.perf_counter() - start)
    except ProblemFailure:
        raise
    except Exception as e:  # noqa: BLE001
        raise ProblemFailure(f"the reference Model raised {type(e).__name__}: {str(e)[:500]}") from e
    if not all_finite(out_a):
        raise ProblemFailure("the reference output contains NaN or Inf for the problem's own inputs")
    # the comparison's own ops are watched like the reference's (guards: a replaced ATen kernel)
    if not guards.record_ops(lambda: tensors_equal(out_a, out_b)):
        c = guards.record_ops(lambda: compare_outputs(out_b, out_a, policy))
        if not c.passed:
            raise ProblemFailure(f"the reference is not deterministic: two runs on the same inputs after the same RNG "
                                 f"seed disagree beyond the tolerance ({c.detail})")
        warnings.append(f"the reference is not bit-for-bit deterministic (cuDNN algorithms, atomics): two runs on "
                        f"the same inputs differ within the tolerance ({c.detail}); ModelNew is compared with it "
                        f"within the same tolerance")
    if any(rng_used):
        warnings.append("the reference draws random numbers (Dropout in training mode, torch.rand...): the reference "
                        "and ModelNew each run right after the same RNG seed, in the mode the problem leaves the "
                        "model in, so ModelNew matches only if it draws the same numbers through torch's generator, "
                        "in the same order")
    info = {"inputs": [describe(t) for t in flatten(inputs)], "outputs": [describe(t) for t in flatten(out_a)]}
    guards.record_ops(lambda: fingerprint(out_a))
    out_b = inputs = None  # freed before the next call
    try:
        inputs1 = make_inputs(1)
        with torch.no_grad():
            # the ops the reference (and below, the comparison) dispatch: their kernels are watched (guards)
            out_c = guards.record_ops(lambda: call(inputs1), guards.watched_ops, guards.reference_ops)
        inputs1 = None
    except ProblemFailure:
        raise
    except Exception as e:  # noqa: BLE001
        raise ProblemFailure(f"the reference Model raised {type(e).__name__}: {str(e)[:500]}") from e
    # degenerate when the output for other inputs would pass as the output for these (equal or within tolerance,
    # e.g. the row sums of a softmax): then a kernel that ignores its inputs passes too
    if guards.record_ops(lambda: tensors_equal(out_a, out_c) or compare_outputs(out_c, out_a, policy).passed):
        warnings.append("degenerate problem: the reference's output does not depend on its inputs, so a kernel that "
                        "returns a constant would pass")
    return warnings, info, any(rng_used)
