"""Where a row of a strided operand starts: the candidates' host helper `kf_fast` reduces an operand's row dims and
strides to a pair (n, s), the row offset being (r % n) * s (r * s when n is 0), so a CUDA kernel divides at most
once a row instead of working the layout out per row (per dim when no pair exists, n < 0). Checked against the
per-dim offset on the layouts `kf_prep` produces: contiguous, sliced, broadcast leading, middle or trailing dims,
transposed and size-1 dims."""

from __future__ import annotations

import random
from math import prod

import pytest
import torch

from kforge_core.synth.backends.host_helpers import HELPERS


@pytest.fixture(scope="module")
def helpers():
    ns = {"torch": torch}
    exec(compile(HELPERS, "helpers.py", "exec"), ns)
    return ns


def _per_dim(r: int, dims, st) -> int:
    off = 0
    for d in range(len(dims) - 1, -1, -1):
        off += (r % dims[d]) * st[d]
        r //= dims[d]
    return off


def _layouts():
    """(tensor as passed, shape it is read at, number of row dims, whether a pair must exist)."""
    x = torch.empty(3, 4, 5, 8)
    yield x, (3, 4, 5, 8), 3, True  # contiguous
    yield x[..., 4:], (3, 4, 5, 4), 3, True  # a slice of the row: still linear over all row dims
    yield torch.empty(5, 8), (3, 4, 5, 8), 3, True  # broadcast over the leading dims: r % 5
    yield torch.empty(4, 1, 8), (3, 4, 5, 8), 3, False  # broadcast over a middle dim: a division per dim
    yield torch.empty(3, 5, 4, 8).transpose(1, 2), (3, 4, 5, 8), 3, False  # transposed
    yield torch.empty(3, 1, 5, 8), (3, 1, 5, 8), 3, True  # a size-1 row dim
    yield torch.empty(3, 4, 5, 1), (3, 4, 5, 8), 3, True  # one value per row (a keepdim statistic)
    yield torch.empty(7, 9)[:, :8], (7, 8), 1, True  # rows further apart than their width
    yield torch.empty(6, 1), (6, 8), 1, True  # a column broadcast along the row


@pytest.mark.parametrize("case", range(9))
def test_pair_gives_every_rows_offset(helpers, case):
    t, shape, nl, fast = list(_layouts())[case]
    inner = 1 if t.shape[-1] != 1 or shape[-1] == 1 else 0
    _, lead = helpers["kf_prep"](t, shape, nl, inner, 2)
    dims = shape[:nl]
    n, s = helpers["kf_fast"](dims, lead)
    assert (n >= 0) == fast, (n, s)
    for r in range(prod(dims)):
        want = _per_dim(r, dims, lead)
        if n >= 0:
            assert (r * s if n == 0 else (r % n) * s) == want, (r, n, s)


def test_random_layouts_agree_with_the_per_dim_offset(helpers):
    rng = random.Random(5)
    for _ in range(300):
        nl = rng.randint(1, 4)
        dims = [rng.choice([1, 2, 3, 5]) for _ in range(nl)]
        st = [rng.choice([0, 1, 4, 7, 40]) for _ in range(nl)]
        n, s = helpers["kf_fast"](dims, st)
        if n < 0:
            continue
        for r in range(prod(dims)):
            assert (r * s if n == 0 else (r % n) * s) == _per_dim(r, dims, st), (dims, st, r)


def test_meta_holds_the_pairs_after_the_strides(helpers):
    m = helpers["kf_meta"]([3, 4, 5], [[0, 0, 8], [160, 40, 8]], "cpu")
    assert m.tolist() == [3, 4, 5, 0, 0, 8, 160, 40, 8, 5, 8, 0, 8]
