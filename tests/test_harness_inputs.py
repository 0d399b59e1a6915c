"""Inputs are made on the evaluation's device when the problem allows it, and on the CPU when it does not."""

import torch

from kforge_core.eval.harness.reference import _make_inputs_on


class _Platform:
    def seed(self, seed):
        torch.manual_seed(seed)


def test_inputs_are_made_on_the_device():
    flag = [True]
    out = _make_inputs_on(lambda: [torch.randn(4, 8), torch.arange(3)], _Platform(), 0, torch.device("meta"), flag)
    assert all(t.device.type == "meta" for t in out)
    assert flag == [True]


def test_a_problem_that_needs_the_cpu_falls_back_for_the_rest_of_the_evaluation():
    def get_inputs():
        x = torch.randn(4, 8)
        return [torch.from_numpy(x.numpy() * 2)]  # host-only code: .numpy() refuses a tensor on another device

    flag = [True]
    out = _make_inputs_on(get_inputs, _Platform(), 0, torch.device("meta"), flag)
    assert out[0].device.type == "cpu"
    assert flag == [False]
    again = _make_inputs_on(get_inputs, _Platform(), 0, torch.device("meta"), flag)  # CPU now, same values
    assert torch.equal(out[0], again[0])


def test_same_seed_same_inputs_and_a_real_failure_still_raises():
    flag = [False]
    a = _make_inputs_on(lambda: [torch.randn(5)], _Platform(), 7, torch.device("cpu"), flag)
    b = _make_inputs_on(lambda: [torch.randn(5)], _Platform(), 7, torch.device("cpu"), flag)
    assert torch.equal(a[0], b[0])

    def broken():
        raise ValueError("no inputs today")

    flag = [True]
    try:
        _make_inputs_on(broken, _Platform(), 0, torch.device("meta"), flag)
    except ValueError as e:
        assert "no inputs today" in str(e)
    else:
        raise AssertionError("a failing get_inputs must raise")
