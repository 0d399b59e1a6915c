"""Shape arithmetic of a kernel's row space: broadcasting, and how a value lies along the trailing k dims of S.

Shapes are right-aligned into the kernel's element shape `S`; the trailing `k` dims of `S` form a row.
"""

from __future__ import annotations

def _aligned(shape: tuple, rank: int) -> tuple:
    return (1,) * (rank - len(shape)) + tuple(shape)


def broadcastable(small: tuple, big: tuple) -> bool:
    if len(small) > len(big):
        return False
    return all(a == 1 or a == b for a, b in zip(_aligned(small, len(big)), big))


def varies_inner(shape: tuple, S: tuple, k: int) -> bool:
    """Does a value of `shape` (right-aligned into S) vary along the trailing k dims of S?"""
    if k == 0:
        return False
    a = _aligned(shape, len(S))
    return any(a[i] > 1 for i in range(len(S) - k, len(S)))


def clean_inner(shape: tuple, S: tuple, k: int) -> bool:
    """Over the trailing k dims the value is either complete (every dim of S with extent > 1) or constant."""
    if k == 0:
        return True
    a = _aligned(shape, len(S))
    inner = [(a[i], S[i]) for i in range(len(S) - k, len(S)) if S[i] > 1]
    return all(x == s for x, s in inner) or all(x == 1 for x, _ in inner)


def expanded_strides(shape: tuple, strides: tuple | None, target: tuple) -> tuple:
    shape = tuple(shape)
    if strides is None:
        strides = _contig(shape)
    a = _aligned(shape, len(target))
    st = (0,) * (len(target) - len(shape)) + tuple(strides)
    return tuple(0 if (x == 1 and t != 1) else s for x, s, t in zip(a, st, target))


def _contig(shape: tuple) -> tuple:
    out, acc = [], 1
    for s in reversed(tuple(shape)):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


def rowmajor_inner(shape: tuple, strides: tuple | None, S: tuple, k: int) -> bool:
    st = expanded_strides(shape, strides, S)
    acc = 1
    for i in range(len(S) - 1, len(S) - k - 1, -1):
        if S[i] != 1 and st[i] != acc:
            return False
        acc *= S[i]
    return True
