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


def _plain(g: torch.Tensor, w: torch.Tensor, atol: float, rtol: float) -> tuple:
    """The element-wise rule written out on whole tensors, one step per quantity: (non-finite count, count outside
    the bound, max abs error, max relative error)."""
    g64, w64 = g.double().reshape(-1), w.double().reshape(-1)
    bad = int((~torch.isfinite(g64)).sum())
    if bad:
        return bad, None, None, None
    diff, mag = (g64 - w64).abs(), w64.abs()
    # maxima kept from 0.0 on, as the chunked check keeps them (a NaN ratio, Inf over Inf, never raises one)
    return (0, int((diff > atol + rtol * mag).sum()), max(0.0, float(diff.max())),
            max(0.0, float((diff / mag.clamp_min(max(atol, 1e-12))).max())))


@pytest.mark.parametrize("case", ["close", "some-off", "nan-in-got", "inf-in-both", "inf-in-want", "overflow"])
def test_one_pass_shortcuts_give_the_plain_rule(chunk, case):
    """The comparison skips its finiteness pass when the sum of squared errors is finite: every case a NaN, an Inf
    or an overflow can make still gets the plain rule's counts and maxima."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(13, 11, generator=gen, dtype=torch.float64)
    g = w + 1e-9
    if case == "some-off":
        g[4, 5] += 1.0
        g[12, 0] -= 0.25
    elif case == "nan-in-got":
        g[6, 6] = float("nan")
    elif case == "inf-in-both":
        g[1, 2] = w[1, 2] = float("inf")
    elif case == "inf-in-want":
        w[3, 3] = float("inf")
    elif case == "overflow":  # finite values whose squared error is not
        g[0, 0], w[0, 0] = 1e200, -1e200
    policy = get_policy("default")
    tol = policy.for_dtype("float64")
    bad, over, max_abs, max_rel = _plain(g, w, tol.atol, tol.rtol)
    c = compare_outputs(g, w, policy)
    if bad:
        assert not c.passed and f"{bad} of 143 elements are NaN or Inf" in c.detail
        return
    assert c.max_abs_error == max_abs
    if case != "inf-in-want":  # Inf over Inf: a NaN ratio, which drops its chunk's maximum (as it always did)
        assert c.max_rel_error == max_rel
    if over:
        assert not c.passed and f"{over} of 143 elements" in c.detail
    else:
        assert c.passed


def test_zero_output_for_tiny_reference_fails_on_relative_l2(chunk):
    w = torch.full((13, 11), 1e-6)
    c = compare_outputs(torch.zeros_like(w), w, get_policy("default"))
    assert not c.passed and "relative L2" in c.detail and "constant output" in c.detail


def test_constant_output_for_tiny_varying_reference_fails(chunk):
    w = torch.randn(13, 11) * 1e-9
    c = compare_outputs(torch.full_like(w, 3e-10), w, get_policy("default"))
    assert not c.passed and "constant output" in c.detail


def test_varying_output_around_1e9_within_tolerance_passes_with_a_note(chunk):
    """Rounding noise: every element within atol + rtol |want|, relative L2 about 1. The element-wise bound
    decides; the note says the check there was absolute."""
    w = torch.randn(13, 11) * 1e-9
    g = torch.randn(13, 11) * 1e-9
    c = compare_outputs(g, w, get_policy("default"))
    assert c.passed, c.detail
    assert c.notes and "relative L2" in c.notes[0] and not c.zero


def test_exact_constant_for_a_nearly_constant_reference_passes(chunk):
    """The row sums of a softmax are 1 up to rounding: exactly 1.0 is right (relative L2 about 1e-7)."""
    w = 1.0 + torch.randn(13, 11) * 1e-7
    c = compare_outputs(torch.ones(13, 11), w, get_policy("default"))
    assert c.passed and not c.notes, c.detail


def test_tiny_scalar_within_tolerance_passes(chunk):
    """One element is no 'constant output': a loss of 1e-9 computed as 1.2e-9 is within atol."""
    c = compare_outputs(torch.tensor(1.2e-9), torch.tensor(1e-9), get_policy("default"))
    assert c.passed and c.notes


def test_zero_outputs_are_reported_as_zero(chunk):
    w = torch.zeros(13, 11)
    c = compare_outputs([torch.zeros_like(w), torch.zeros(3)], [w, torch.zeros(3)], get_policy("default"))
    assert c.passed and c.zero
    c = compare_outputs([torch.zeros_like(w), torch.ones(3)], [w, torch.ones(3)], get_policy("default"))
    assert c.passed and not c.zero
    c = compare_outputs(torch.full((13, 11), 1e-5), w, get_policy("default"))  # constant, nonzero for zero
    assert not c.passed and "constant output" in c.detail


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.uint8,
                                   torch.bool, torch.complex64])
def test_fingerprint_one_pass_sum_is_the_weighted_sum(chunk, dtype):
    """The CPU's dot product gives the digest's sum of element bits times weights modulo 2^64 exactly."""
    x = (torch.randn(13, 11, dtype=torch.float64) * 1e6).to(dtype) if dtype != torch.bool else torch.rand(13, 11) > 0.5
    flat = torch.view_as_real(x).reshape(-1) if x.is_complex() else x.reshape(-1)
    w, base = compare._weights_on(flat.device)
    want = 0
    for lo in range(0, flat.numel(), w.numel()):
        c = flat[lo:lo + w.numel()]
        c = (c + 0.0).view(compare._BITS[c.element_size()]) if c.is_floating_point() else \
            c.view(torch.uint8) if c.dtype == torch.bool else c
        want = (want * base + int((c * w[:c.numel()]).sum())) & compare._MASK
    assert compare.fingerprint(x) == ((str(x.dtype), tuple(x.shape), want),)


def test_tensors_equal_and_fingerprints_across_chunks(chunk):
    """Equality (NaN equal to NaN, -0.0 to 0.0) and fingerprints: the same answer in one chunk or many."""
    a = torch.randn(13, 11)
    a[3, 4] = float("nan")
    a[5, 5] = 0.0
    b = a.clone()
    b[5, 5] = -0.0
    assert compare.tensors_equal(a, b) and compare.fingerprint(a) == compare.fingerprint(b)
    b[12, 10] = torch.nextafter(b[12, 10], torch.tensor(10.0))  # one step, in the last chunk
    assert not compare.tensors_equal(a, b) and compare.fingerprint(a) != compare.fingerprint(b)
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.bool, torch.complex64):
        x = (torch.randn(40) * 4).to(dtype)
        y = x.clone()
        y[39] = ~y[39] if dtype == torch.bool else y[39] + 1
        assert compare.fingerprint([x, 2]) == compare.fingerprint([x.clone(), 2])
        assert compare.fingerprint(x) != compare.fingerprint(y), dtype
    assert compare.fingerprint([a, 2]) != compare.fingerprint([a, 3])  # the scalars count too


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


def test_footprint_says_when_a_problem_cannot_fit():
    """Before the evaluation: the bound (inputs twice and outputs twice, or inputs once and outputs three times,
    both models' parameters, the reference's working memory) against what the device has, with the numbers."""
    from kforge_core.eval.harness import footprint
    from kforge_core.platform import get_platform

    sizes = footprint.Sizes(inputs=1 << 50, params=1 << 20, outputs=1 << 50, work=0)
    assert sizes.live == (1 << 51) + (1 << 20)
    assert sizes.needed() == 2 * (1 << 20) + 4 * (1 << 50)
    why = footprint.does_not_fit(sizes, get_platform("cpu"), held=0)
    assert "does not fit" in why and "needs about 4.19e+06 GiB" in why and "available" in why, why
    assert footprint.does_not_fit(footprint.Sizes(inputs=1024, outputs=1024), get_platform("cpu"), held=0) == ""
    assert footprint.Sizes(inputs=1, outputs=10).needed() == 31  # outputs three times beat inputs twice


def _chunk_sums(t: torch.Tensor) -> tuple[list[torch.Tensor], int]:
    """Each chunk's weighted sum, as `_tensor_fingerprint` takes them, and the device's chaining base."""
    flat = t.detach().reshape(-1)
    w, base = compare._weights_on(flat.device)
    sums = []
    for lo in range(0, flat.numel(), w.numel()):
        c = flat[lo:lo + w.numel()]
        c = (c + 0.0).view(compare._BITS[c.element_size()]) if c.is_floating_point() else \
            c.view(torch.uint8) if c.dtype == torch.bool else c
        sums.append(torch.dot(c.to(torch.int64), w[:c.numel()]))
    return sums, base


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_fingerprint_read_once_equals_the_chained_chunks(dtype):
    """Chunk sums chained on their device and read once (`_chained`, the GPU's way) give the digest that reading
    each chunk's sum and chaining h = h * base + s gives (the CPU's way, `_tensor_fingerprint` here): a
    multi-chunk tensor, one of a chunk and a bit, a single element."""
    step = compare._weights_on(torch.device("cpu"))[0].numel()
    for n in (1, step + 3, 3 * step + 17):
        t = (torch.randn(n) * 100).to(dtype)
        sums, base = _chunk_sums(t)
        horner = 0
        for s_ in sums:
            horner = (horner * base + int(s_)) & compare._MASK
        assert compare._chained(sums, base) == horner == compare._tensor_fingerprint(t)[2], (n, dtype)


def test_passing_figures_read_once_equal_the_exact_pass(monkeypatch):
    """A passing comparison's figures come from one read after every chunk; a failing one from the exact pass,
    chunk by chunk, which still names the worst element and the first NaN (small chunks: several of each)."""
    monkeypatch.setattr(compare, "_CHUNK", 4 * 1000)
    want = torch.randn(5000, dtype=torch.float64).float()
    got = want + 1e-6 * torch.randn(5000)
    tol = get_policy("default").for_dtype("float32")
    args = (got.reshape(-1), want.reshape(-1), tol, torch.device("cpu"), torch.float64, 1000)
    fast = compare._passing_stats(*args)
    exact = compare._failing_stats(*args)
    assert exact[0] == 0 and exact[2] == 0
    assert fast == pytest.approx(exact[4:], rel=1e-12)
    bad = got.clone()
    bad[3500] = float("nan")
    bad[1234] += 1.0
    assert compare._passing_stats(bad, want, tol, torch.device("cpu"), torch.float64, 1000) is None
    c = compare_outputs(bad, want, get_policy("default"))
    assert not c.passed and "1 of 5000 elements are NaN or Inf (first at [3500])" in c.detail, c.detail
    bad[3500] = want[3500]
    c = compare_outputs(bad, want, get_policy("default"))
    assert not c.passed and "worst at [1234]" in c.detail, c.detail


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_clear_pass_on_the_cpu_decides_as_the_exact_rule_at_the_edge(monkeypatch, dtype):
    """The CPU's float32 clear-pass check hands every element near its bound to the exact float64 pass: outputs
    placed just inside, at and just outside atol + rtol |want| get the plain rule's verdict, with the shortcut and
    without it (several steps)."""
    monkeypatch.setattr(compare, "_FAST_CHUNK", 64)
    policy = get_policy("default")
    tol = policy.for_dtype(str(dtype).replace("torch.", ""))
    gen = torch.Generator().manual_seed(5)
    want = torch.randn(1000, generator=gen).to(dtype)
    w64 = want.double()
    for share in (0.5, 0.99999, 1.0, 1.00001, 1.5):
        got = (w64 + share * (tol.atol + tol.rtol * w64.abs())).to(dtype)  # rounded to the dtype, as a kernel's
        _, over, max_abs, _ = _plain(got, want, tol.atol, tol.rtol)
        fast = compare_outputs(got, want, policy)
        with monkeypatch.context() as m:
            m.setattr(compare, "_NARROW_FAST", frozenset())
            exact = compare_outputs(got, want, policy)
        assert fast.passed == exact.passed == (over == 0), (dtype, share, fast.detail, exact.detail)
        assert fast.max_abs_error == pytest.approx(max_abs, rel=1e-6)


def test_clear_pass_figures_match_the_exact_pass():
    """A passing float32 comparison on the CPU (the clear-pass check): the same maxima as the float64 pass up to
    float32 rounding, the same relative L2 decisions (sums in float64), the same notes."""
    gen = torch.Generator().manual_seed(9)
    want = torch.randn(300_000, generator=gen)
    got = want + 1e-6 * torch.randn(300_000, generator=gen)
    tol = get_policy("default").for_dtype("float32")
    fast = compare._clear_pass_stats(got, want, tol)
    exact = compare._failing_stats(got, want, tol, torch.device("cpu"), torch.float64, 1 << 20)
    assert fast is not None and exact[0] == 0 and exact[2] == 0
    assert fast == pytest.approx(exact[4:], rel=1e-6)
    tiny = want * 1e-20  # squares under float32's range: still summed right
    assert compare._clear_pass_stats(tiny * (1 + 1e-7), tiny, tol)[3] == pytest.approx(float((tiny.double() ** 2).sum()),
                                                                                     rel=1e-6)
    got[123] = float("nan")
    assert compare._clear_pass_stats(got, want, tol) is None


def test_warm_up_runs_the_checks_without_touching_the_global_generator():
    """A pre-started child warms the checks (`compare.warm_up`) before its request: nothing a later evaluation
    draws from torch's global generator may depend on it."""
    torch.manual_seed(7)
    before = torch.get_rng_state()
    compare.warm_up(torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.device("cpu") in compare._weights  # the fingerprint's weights were made too
