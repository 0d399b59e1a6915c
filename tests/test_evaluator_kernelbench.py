"""What real KernelBench problems need from the evaluator (issue 26), each with a problem of our own in its format:
references that draw random numbers (Dropout in training mode), references that differ from run to run within the
tolerance (cuDNN, atomics), outputs that are rounding noise, outputs that collapse to zeros, a problem too large for
the machine, and the evaluation's memory report.

Real child processes and a real g++, registered with the shared evalkit batch (two at a time)."""

from __future__ import annotations

import pytest

from candidates.evalkit import HONEST, HOSTILE, PROBLEMS, case
from kforge_core.errors import ProblemError

M = __name__

case(M, "kb:dropout_same_rng", "dropout_train.py", HONEST / "dropout_train.py")
case(M, "kb:dropout_own_rng", "dropout_train.py", HOSTILE / "dropout_own_rng.py")
case(M, "kb:jitter_reference", "jitter_reference.py", HONEST / "tanh.py")
case(M, "kb:rounding_noise", "rounding_noise.py", HONEST / "rounding_noise.py")
case(M, "kb:zero_collapse", "zero_collapse.py", HONEST / "zero_collapse.py")


def assert_correct(v):
    assert v.status == "correct", f"{v.status}: {v.reason}\n{v.log_tail}"


def test_dropout_in_training_mode_is_judged_with_the_same_seed(verdicts):
    """Policy: the reference and ModelNew each run right after the same RNG seed, in the mode the problem leaves
    the model in (training: Dropout is active). Dropout drawn through torch's generator matches; the verdict says
    the reference draws random numbers."""
    v = verdicts["kb:dropout_same_rng"]
    assert_correct(v)
    assert any("draws random numbers" in w for w in v.warnings), v.warnings
    assert not any("identically zero" in w for w in v.warnings), v.warnings


def test_dropout_with_its_own_random_numbers_is_incorrect_and_says_why(verdicts):
    v = verdicts["kb:dropout_own_rng"]
    assert v.status == "incorrect", (v.status, v.reason)
    assert "draws random numbers" in v.reason and "same RNG seed" in v.reason, v.reason


def test_reference_that_differs_within_tolerance_is_compared_within_it(verdicts):
    """Two runs of the reference on the same inputs differ in the last bits: not a refusal; the verdict says so."""
    v = verdicts["kb:jitter_reference"]
    assert_correct(v)
    assert any("not bit-for-bit deterministic" in w for w in v.warnings), v.warnings


def test_rounding_noise_outputs_pass_element_wise_with_a_note(verdicts):
    """Outputs around 1e-8 that are rounding noise: every element within atol, relative L2 about 1. Correct, with a
    note that the check there was absolute."""
    v = verdicts["kb:rounding_noise"]
    assert_correct(v)
    assert any("within tolerance only absolutely" in w and "relative L2" in w for w in v.warnings), v.warnings


def test_output_that_collapses_to_zero_is_flagged(verdicts):
    v = verdicts["kb:zero_collapse"]
    assert_correct(v)
    assert any("identically zero" in w for w in v.warnings), v.warnings
    assert any("degenerate" in w for w in v.warnings), v.warnings


def test_verdict_reports_the_evaluations_memory(verdicts):
    """The problem's own tensor sizes (16 x 64 fp32 in and out), the bound the evaluation needs, and the peak of
    each phase."""
    mem = verdicts["kb:jitter_reference"].memory
    assert mem["sizes"]["inputs"] == 16 * 64 * 4 and mem["sizes"]["outputs"] == 16 * 64 * 4
    assert mem["live_bytes"] == 2 * 16 * 64 * 4 and mem["needed_bytes"] >= mem["live_bytes"]
    assert set(mem["peak_bytes"]) == {"reference checks", "correctness"}
    assert all(v > 0 for v in mem["peak_bytes"].values())


def test_problem_too_large_for_the_machine_is_a_problem_error_with_numbers():
    """The reference's first forward runs out of memory: not a crash, not the candidate's verdict, but a problem
    error saying what the problem's tensors take and what is available."""
    from kforge_core.eval.evaluator import EvalOptions, evaluate
    from kforge_core.problem import load_problem

    with pytest.raises(ProblemError, match="does not fit") as info:
        evaluate(load_problem(path=PROBLEMS / "too_big.py"), (HONEST / "tanh.py").read_text(), "cpu",
                 EvalOptions(timing=False))
    assert "inputs" in str(info.value) and "GiB" in str(info.value) and "available" in str(info.value)
