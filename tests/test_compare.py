"""Output comparison: the chunked float64 check finds the same worst element, NaN and L2 failures as a whole-tensor
check would, whichever chunk they fall in."""

import pytest
import torch

from kforge_core.harness import compare
from kforge_core.harness.compare import compare_outputs
from kforge_core.tolerance import get_policy


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
