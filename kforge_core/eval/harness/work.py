"""Whose work a candidate's forward is: the share of its time spent in the candidate's own compiled kernels, and the
ATen compute of the reference's kind it ran itself.

Launch counts cannot tell an honest kernel from a decorative one: a load_inline function returning
`at::layer_norm(...)`, a forward that switches to PyTorch plus a one-element launch once timing starts, or
`torch.matmul` beside a trivial kernel all launch something. So every verdict reports work:
- `custom_share`: kernel time / forward time. On targets whose kernel calls return when the work is done (CPU) it is
  measured on every checked call (time inside the compiled kernels' calls against the forward call's wall time) and
  over the timed calls (the same kernel time per call against the median timed call); elsewhere it is read from a
  profile (device time of the candidate's kernels against all device time of a forward). The lower of the two
  measurements is the verdict's figure: a forward that changes behaviour once timing starts shows it there.
- `aten_compute`: the ATen ops of the reference's kind (compute, not views, copies or allocations) the candidate's
  forward dispatched itself, e.g. the built-in synthesizer's vendor matmul/convolution around its fused epilogue
  (honest, and shown as such) or a kernel that calls `at::layer_norm` (not a custom kernel at all).
"""

from __future__ import annotations

import re

# Ops that move, view, allocate or fill memory: not "compute of the reference's kind" when a candidate runs them.
_PLUMBING = re.compile(
    r"^aten::(_?(unsafe_)?view\w*|_?reshape\w*|empty\w*|new_\w+|clone|copy_?|_copy_from\w*|contiguous|detach\w*|"
    r"alias\w*|as_strided\w*|expand\w*|permute|transpose\w*|t_?|select\w*|slice\w*|unsqueeze\w*|squeeze\w*|"
    r"zeros\w*|ones\w*|full\w*|fill_?|zero_|lift\w*|_to_copy|to|resize_|set_|split\w*|chunk|unbind\w*|narrow\w*|"
    r"flatten|unflatten|_local_scalar_dense|item|is_nonzero|sym_\w+|size|stride|numel|dim|equal|result_type|"
    r"scalar_tensor|arange\w*|randn?\w*|normal_|uniform_|random_|_has_compatible_shallow_copy_type|"
    r"is_same_size|_nested_\w+|record_stream)$")


def aten_compute(candidate_ops: set[str], reference_ops: set[str]) -> list[str]:
    return sorted(op for op in candidate_ops & reference_ops if not _PLUMBING.match(op))


def share(kernel_ns: float, forward_ns: float) -> float | None:
    return min(1.0, kernel_ns / forward_ns) if forward_ns > 0 else None


def summary(checked_share: float | None, timed_share: float | None, profiled_share: float | None,
            compute: list[str], method: str) -> dict:
    """Verdict fields, and a warning when ATen compute of the reference's kind ran inside the candidate."""
    measured = [s for s in (checked_share, timed_share, profiled_share) if s is not None]
    out: dict = {"custom_share": min(measured) if measured else None,
                 "custom_share_detail": {"checked_calls": checked_share, "timed_calls": timed_share,
                                         "profiled": profiled_share, "method": method},
                 "aten_compute": compute, "warnings": []}
    if compute:
        pct = f"; {100 * out['custom_share']:.0f}% of the forward's time is in its own kernels" \
            if out["custom_share"] is not None else ""
        out["warnings"].append(f"ModelNew's forward runs ATen compute of the reference's kind itself: "
                               f"{', '.join(compute[:6])}{' ...' if len(compute) > 6 else ''} (vendor or framework "
                               f"kernels, not the candidate's own{pct})")
    return out
