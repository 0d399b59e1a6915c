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


_CHUNK = 1 << 22  # elements per comparison step: bounds the float64 working set to tens of MiB


def _work_device(t: torch.Tensor) -> torch.device:
    """Where a chunk is compared in float64: on the tensor's own device where it has float64 (CUDA, CPU), so a
    multi-GiB GPU output is neither copied to the host whole nor widened there; on the CPU otherwise (MPS)."""
    return t.device if t.device.type in ("cpu", "cuda") else torch.device("cpu")


def _compare_tensor(g: torch.Tensor, w: torch.Tensor, policy: TolerancePolicy, label: str) -> Comparison:
    dtype_name = str(w.dtype).replace("torch.", "")
    tol = policy.for_dtype(dtype_name)
    numel = w.numel()
    if numel == 0:
        return Comparison(True, "empty")
    wide = torch.complex128 if w.is_complex() else torch.float64
    dev = _work_device(w)
    gf, wf = g.detach().reshape(-1), w.detach().reshape(-1)
    n_bad = n_over = 0
    first_bad = None
    max_abs = max_rel = sq_err = sq_ref = 0.0
    worst = None  # (excess over the limit, flat index, got, want)
    for lo in range(0, numel, _CHUNK):
        g64 = gf[lo:lo + _CHUNK].to(dev, wide)
        w64 = wf[lo:lo + _CHUNK].to(dev, wide)
        bad = ~torch.isfinite(g64)
        nb = int(bad.sum())
        if nb:
            n_bad += nb
            if first_bad is None:
                first_bad = lo + int(bad.nonzero()[0])
            continue
        diff = (g64 - w64).abs()
        mag = w64.abs()
        limit = tol.atol + tol.rtol * mag
        max_abs = max(max_abs, float(diff.max()))
        max_rel = max(max_rel, float((diff / mag.clamp_min(max(tol.atol, 1e-12))).max()))
        sq_err += float((diff * diff).sum())
        sq_ref += float((mag * mag).sum())
        over = diff > limit
        no = int(over.sum())
        if no:
            n_over += no
            excess = diff - limit
            i = int(torch.argmax(excess))
            if worst is None or float(excess[i]) > worst[0]:
                worst = (float(excess[i]), lo + i, complex(g64[i]) if g64.is_complex() else float(g64[i]),
                         complex(w64[i]) if w64.is_complex() else float(w64[i]))
    if n_bad:
        return Comparison(False, f"{label}: {n_bad} of {numel} elements are NaN or Inf (first at "
                                 f"{_index(first_bad, w.shape)}); NaN/Inf never pass", float("inf"), float("inf"))
    norm_w = sq_ref ** 0.5
    rel_l2 = sq_err ** 0.5 / norm_w if norm_w > 0 else float(max_abs > 0)
    if n_over:
        _, flat, got_v, want_v = worst
        return Comparison(False, f"{label}: {n_over} of {numel} elements ({100 * n_over / numel:.2g}%) outside "
                                 f"atol={tol.atol:g} rtol={tol.rtol:g}; worst at {_index(flat, w.shape)}: got "
                                 f"{got_v:.6g}, expected {want_v:.6g} (abs error {abs(got_v - want_v):.3g}); max abs "
                                 f"error {max_abs:.3g}", max_abs, max_rel)
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
