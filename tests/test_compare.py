"""Output comparison: the chunked float64 check finds the same worst element, NaN and L2 failures as a whole-tensor
check would, whichever chunk they fall in."""

import pytest
import torch

from kforge_core.eval.harness import compare
from kforge_core.eval.harness.compare import compare_outputs
from kforge_core.eval.tolerance import get_policy


@pytest.fixture(params=[1 << 22, 7], ids=["one-chunk", "many-chunks"])
def chunk(request, monkeypatch):
    monkeypatch.setattr(compare, "_CHUNK", request.param)
    return request.param


def test_equal_outputs_pass(chunk):
    w = torch.randn(13, 11)
    c = compare_outputs(w.clone(), w, get_policy("default"))
    assert c.passed and c.max_abs_error == 0.0


def test_worst_element_is_reported_across_chunks(chunk):
    w = torch.randn(13, 11)
    g = w.clone()
    g[2, 3] += 0.01
    g[11, 9] += 0.5  # the worst one, in a late chunk
    c = compare_outputs(g, w, get_policy("default"))
    assert not c.passed
    assert "2 of 143 elements" in c.detail and "worst at [11, 9]" in c.detail
    assert c.max_abs_error == pytest.approx(0.5, rel=1e-5)


def test_nan_anywhere_fails_with_its_first_index(chunk):
    w = torch.randn(13, 11)
    g = w.clone()
    g[12, 10] = float("nan")
    g[9, 1] = float("inf")
    c = compare_outputs(g, w, get_policy("default"))
    assert not c.passed and "2 of 143 elements are NaN or Inf (first at [9, 1])" in c.detail


def test_zero_output_for_tiny_reference_fails_on_relative_l2(chunk):
    w = torch.full((13, 11), 1e-6)
    c = compare_outputs(torch.zeros_like(w), w, get_policy("default"))
    assert not c.passed and "relative L2" in c.detail


def test_complex_and_integer_outputs(chunk):
    w = torch.randn(5, 7, dtype=torch.complex64)
    assert compare_outputs(w.clone(), w, get_policy("default")).passed
    g = w.clone()
    g[4, 6] += 1.0
    assert "worst at [4, 6]" in compare_outputs(g, w, get_policy("default")).detail
    i = torch.arange(20)
    j = i.clone()
    j[17] += 1
    assert not compare_outputs(j, i, get_policy("default")).passed


def _steps_above(value: float, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """`value`, then `steps` representable values above it, as one-element tensors of `dtype`."""
    t = torch.tensor([value], dtype=dtype)
    for _ in range(steps):
        t = torch.nextafter(t, torch.tensor([float("inf")], dtype=dtype))
    return t


@pytest.mark.parametrize("value", [2.0, 4.0, 4.5])
def test_bf16_two_rounding_steps_pass_and_three_fail(value):
    """Two roundings in a chain may each land one bf16 step from the reference's: two steps off is correct. Just
    above a power of two that is more than rtol=atol=1e-2 allows (the KernelBench policy still says no)."""
    want = torch.full((64,), value, dtype=torch.bfloat16)  # many elements: the relative L2 bound is not the judge
    two = want.clone()
    two[0] = _steps_above(value, 2, torch.bfloat16)
    three = want.clone()
    three[0] = _steps_above(value, 3, torch.bfloat16)
    assert compare_outputs(two, want, get_policy("default")).passed
    assert not compare_outputs(three, want, get_policy("default")).passed
    if value < 4.5:
        assert not compare_outputs(two, want, get_policy("kernelbench")).passed


def test_fp16_keeps_the_half_tolerance():
    policy = get_policy("default")
    assert policy.for_dtype("float16") == policy.half and policy.for_dtype("bfloat16").rtol == pytest.approx(1.6e-2)
    assert policy.to_dict()["bf16"]["rtol"] == pytest.approx(1.6e-2)
    want = torch.full((64,), 2.0, dtype=torch.float16)
    got = want.clone()
    got[0] = 2.0 + 0.031  # within rtol 1.6e-2 of 2.0 but outside fp16's 1e-2
    assert not compare_outputs(got, want, policy).passed
