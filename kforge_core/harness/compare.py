"""Compare a candidate's outputs with the reference's: structure, shape, dtype, then values under a tolerance."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..tolerance import TolerancePolicy


@dataclass
class Comparison:
    passed: bool
    detail: str
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0


_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


def flatten(out) -> list:
    if isinstance(out, (list, tuple)):
        return [x for item in out for x in flatten(item)]
    if isinstance(out, dict):
        return [x for k in sorted(out) for x in flatten(out[k])]
    return [out]


def describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)} {x.device.type}"
    return type(x).__name__


def _index(flat_index: int, shape: torch.Size) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat_index % dim)
        flat_index //= dim
    return list(reversed(idx))


def compare_outputs(got, want, policy: TolerancePolicy) -> Comparison:
    got_l, want_l = flatten(got), flatten(want)
    if len(got_l) != len(want_l):
        return Comparison(False, f"returned {len(got_l)} output(s), the reference returns {len(want_l)}")
    worst_abs = worst_rel = 0.0
    for k, (g, w) in enumerate(zip(got_l, want_l)):
        label = f"output {k}" if len(want_l) > 1 else "output"
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                return Comparison(False, f"{label} is a {type(g).__name__}, expected a tensor {describe(w)}")
            if type(g) not in _PLAIN_TENSOR_TYPES:  # a subclass can override the very methods a check calls
                return Comparison(False, f"{label} is a torch.Tensor subclass ({type(g).__name__}); outputs must be "
                                         f"plain tensors")
            if g.shape != w.shape:
                return Comparison(False, f"{label} has shape {list(g.shape)}, expected {list(w.shape)}")
            if g.dtype != w.dtype:
                return Comparison(False, f"{label} has dtype {g.dtype}, expected {w.dtype}")
            c = _compare_tensor(g, w, policy, label)
            worst_abs, worst_rel = max(worst_abs, c.max_abs_error), max(worst_rel, c.max_rel_error)
            if not c.passed:
                c.max_abs_error, c.max_rel_error = worst_abs, worst_rel
                return c
        else:
            if isinstance(g, torch.Tensor) or g != w:
                return Comparison(False, f"{label} is {g!r}, expected {w!r}")
    return Comparison(True, "all outputs match", worst_abs, worst_rel)


def _compare_tensor(g: torch.Tensor, w: torch.Tensor, policy: TolerancePolicy, label: str) -> Comparison:
    dtype_name = str(w.dtype).replace("torch.", "")
    tol = policy.for_dtype(dtype_name)
    g64 = g.detach().to("cpu", torch.float64) if not g.is_complex() else g.detach().cpu().to(torch.complex128)
    w64 = w.detach().to("cpu", torch.float64) if not w.is_complex() else w.detach().cpu().to(torch.complex128)
    if g64.numel() == 0:
        return Comparison(True, "empty")
    bad = ~torch.isfinite(g64)
    if bool(bad.any()):
        n = int(bad.sum())
        first = _index(int(bad.flatten().nonzero()[0]), g64.shape)
        return Comparison(False, f"{label}: {n} of {g64.numel()} elements are NaN or Inf (first at {first}); "
                                 f"NaN/Inf never pass", float("inf"), float("inf"))
    diff = (g64 - w64).abs()
    limit = tol.atol + tol.rtol * w64.abs()
    over = diff > limit
    max_abs = float(diff.max())
    rel = diff / w64.abs().clamp_min(max(tol.atol, 1e-12))
    max_rel = float(rel.max())
    norm_w = float(torch.linalg.vector_norm(w64))
    rel_l2 = float(torch.linalg.vector_norm(g64 - w64)) / norm_w if norm_w > 0 else float(diff.max() > 0)
    if bool(over.any()):
        n = int(over.sum())
        flat = int(torch.argmax(diff - limit))
        idx = _index(flat, g64.shape)
        got_v, want_v = float(g64.flatten()[flat]), float(w64.flatten()[flat])
        return Comparison(False, f"{label}: {n} of {g64.numel()} elements ({100 * n / g64.numel():.2g}%) outside "
                                 f"atol={tol.atol:g} rtol={tol.rtol:g}; worst at {idx}: got {got_v:.6g}, expected "
                                 f"{want_v:.6g} (abs error {abs(got_v - want_v):.3g}); max abs error {max_abs:.3g}",
                          max_abs, max_rel)
    if tol.rel_l2_max and rel_l2 > tol.rel_l2_max:
        return Comparison(False, f"{label}: relative L2 error {rel_l2:.3g} exceeds {tol.rel_l2_max:g} although every "
                                 f"element is within atol={tol.atol:g} (outputs too small for an absolute check: "
                                 f"a zero or constant output would pass it)", max_abs, max_rel)
    return Comparison(True, f"{label}: max abs error {max_abs:.3g}, relative L2 {rel_l2:.3g}", max_abs, max_rel)


def tensors_equal(a, b) -> bool:
    """Exact equality (NaN equal to NaN at the same places), for the input-mutation check."""
    for x, y in zip(flatten(a), flatten(b)):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype:
                return False
            if x.is_floating_point() or x.is_complex():
                if not torch.equal(torch.isnan(x), torch.isnan(y)):
                    return False
                x, y = torch.nan_to_num(x), torch.nan_to_num(y)
            if not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True
