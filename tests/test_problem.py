"""Problems (KernelBench format): static checks in the caller, dynamic checks in an evaluation child."""

from __future__ import annotations

import textwrap

import pytest

from candidates.evalkit import PROBLEMS
from kforge_core.errors import ProblemError, UsageError
from kforge_core.eval.evaluator import validate_problem
from kforge_core.problem import load_problem

GOOD = (PROBLEMS / "swish_small.py").read_text()


def make(forward: str, inputs: str = "[torch.randn(8, 16)]", init: str = "[]", extra: str = "") -> str:
    return textwrap.dedent(f"""\
        import torch
        import torch.nn as nn
        {extra}

        class Model(nn.Module):
            def __init__(self):
                super().__init__()

            def forward(self, x):
                {forward}


        def get_inputs():
            return {inputs}


        def get_init_inputs():
            return {init}
        """)


# ------------------------------------------------------------------------------------------------------- static

def test_load_from_file():
    p = load_problem(path=PROBLEMS / "swish_small.py")
    assert p.name == "swish_small" and p.path is not None and "Swish" in p.description
    assert p.source == GOOD


def test_load_from_text():
    p = load_problem(text=GOOD)
    assert p.name.startswith("pasted_") and p.path is None
    assert p.digest == load_problem(text=GOOD).digest


def test_file_and_text_together_or_neither_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        load_problem()
    with pytest.raises(UsageError):
        load_problem(path=PROBLEMS / "swish_small.py", text=GOOD)
    with pytest.raises(UsageError):
        load_problem(path=tmp_path / "missing.py")


def test_syntax_error_reports_line():
    text = GOOD.replace("def get_inputs():", "def get_inputs(:")
    line = text.splitlines().index("def get_inputs(:") + 1
    with pytest.raises(ProblemError) as e:
        load_problem(text=text)
    assert e.value.line == line and "syntax" in str(e.value)


def test_empty_problem():
    with pytest.raises(ProblemError, match="empty"):
        load_problem(text="   \n")


@pytest.mark.parametrize("missing", ["Model", "get_inputs", "get_init_inputs"])
def test_missing_required_names(missing):
    renamed = {"Model": ("class Model(", "class Modle("), "get_inputs": ("def get_inputs(", "def get_input("),
               "get_init_inputs": ("def get_init_inputs(", "def get_init_input(")}[missing]
    with pytest.raises(ProblemError, match=f"missing {missing}"):
        load_problem(text=GOOD.replace(*renamed))


def test_model_without_forward():
    with pytest.raises(ProblemError, match="no forward"):
        load_problem(text=GOOD.replace("def forward(", "def forwrd("))


def test_wrong_kind_of_required_name():
    text = GOOD.replace("def get_init_inputs():\n    return [features]", "get_init_inputs = [features]")
    with pytest.raises(ProblemError, match="get_init_inputs must be a function"):
        load_problem(text=text)


# ------------------------------------------------------------------------------------------------------ dynamic
# Each validation is a child process (~1.5 s of `import torch`): they run two at a time, started together.

BROKEN_INPUTS = {"str": "[torch.randn(4), 'abc']", "dict": "[{'x': torch.randn(4)}]"}
VALIDATIONS = {
    "good": GOOD,
    "str": make("return x", inputs=BROKEN_INPUTS["str"]),
    "dict": make("return x", inputs=BROKEN_INPUTS["dict"]),
    "raises": make("raise ValueError('reference is broken')"),
    "random": make("return x + torch.rand_like(x)"),
    "drifting": make("self.calls = getattr(self, 'calls', 0) + 1; return x * self.calls"),
    "jitter": make("self.calls = getattr(self, 'calls', 0) + 1; return x + 1e-6 * self.calls"),
    "degenerate": make("return torch.softmax(x, dim=-1).sum(dim=-1)"),
    "nan": make("return torch.log(x - 100.0)"),
}


@pytest.fixture(scope="module")
def validated(kforge_cache_dir):
    """name -> ProblemReport, or the ProblemError it raised."""
    from concurrent.futures import ThreadPoolExecutor

    from kforge_core.platform import get_platform

    get_platform("cpu", require_available=True)

    def run(text):
        try:
            return validate_problem(load_problem(text=text), "cpu", timeout_s=60)
        except ProblemError as e:
            return e

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run, text) for name, text in VALIDATIONS.items()}
        yield {name: f.result() for name, f in futures.items()}


def raised(result, match: str) -> None:
    assert isinstance(result, ProblemError), f"expected ProblemError, got {result!r}"
    assert match.lower() in str(result).lower(), str(result)

def test_validate_good_problem(validated):
    report = validated["good"]
    assert not isinstance(report, Exception), report
    assert report.inputs == ["float32[16, 256] cpu"] and report.outputs == ["float32[16, 256] cpu"]
    assert report.warnings == [] and report.reference_ms is not None


@pytest.mark.parametrize("what", sorted(BROKEN_INPUTS))
def test_non_tensor_inputs(validated, what):
    """Inputs must be tensors (or lists of them) and Python numbers: a string or a dict is a ProblemError."""
    raised(validated[what], what)


def test_reference_that_raises(validated):
    raised(validated["raises"], "reference is broken")


def test_reference_drawing_random_numbers_is_judged_with_the_same_seed(validated):
    """A reference that draws random numbers in forward (Dropout in training mode) is usable: both sides run right
    after the same RNG seed, and the report says so."""
    report = validated["random"]
    assert not isinstance(report, Exception), report
    assert any("draws random numbers" in w for w in report.warnings), report.warnings


def test_reference_disagreeing_with_itself_beyond_tolerance(validated):
    """Two runs on the same inputs after the same seed that differ beyond the tolerance cannot judge anything."""
    raised(validated["drifting"], "not deterministic")
    raised(validated["drifting"], "beyond the tolerance")


def test_reference_differing_within_tolerance_is_usable(validated):
    """Run-to-run differences within the tolerance (cuDNN, atomics) are a note, not a refusal."""
    report = validated["jitter"]
    assert not isinstance(report, Exception), report
    assert any("not bit-for-bit deterministic" in w for w in report.warnings), report.warnings


def test_degenerate_reference_warns(validated):
    """Output independent of the inputs (the row sums of a softmax are 1, up to rounding): a warning, since a
    constant would pass."""
    report = validated["degenerate"]
    assert not isinstance(report, Exception), report
    assert any("degenerate" in w for w in report.warnings), report.warnings


def test_reference_producing_nan(validated):
    raised(validated["nan"], "NaN")


def test_evaluate_raises_problem_error_for_a_broken_problem():
    """evaluate() on an unusable problem raises ProblemError (it is not the candidate's verdict)."""
    from kforge_core.eval.evaluator import EvalOptions, evaluate

    text = make("raise ValueError('reference is broken')")
    with pytest.raises(ProblemError, match="reference is broken"):
        evaluate(load_problem(text=text), "class ModelNew: pass\n", "cpu", EvalOptions(timing=False))
