"""GPU checks of the evaluator's detection (issue 21): the CUDA timer's synchronization bound at the driver level
before any candidate code, the completion check of its end timestamp, memory introspection refused, CUDA
load_inline objects vetted by allow-list (honest builds pass, a host `open` does not), and the custom-kernel share
read from the profile on every verdict. Skipped without an NVIDIA GPU; run with scripts/gpu_check.sh."""

from __future__ import annotations

import pytest
import torch

from test_gpu_eval import CANDIDATES, EXAMPLES, SWISH, _evaluate, _save

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs an NVIDIA GPU (run scripts/gpu_check.sh on a GPU machine)")]

EXAMPLE = (EXAMPLES / "cuda" / "candidate.py").read_text()
SLEEP_CYCLES = 50_000_000  # tens of milliseconds of device time at any clock


def _cuda_platform():
    from kforge_core.platform import get_platform

    platform = get_platform("cuda", require_available=True)
    platform.prepare_child()
    return platform


def test_timer_synchronization_is_bound_below_torch(monkeypatch):
    """The exploit: the function one level below torch.cuda.synchronize replaced for one call (0.196 ms reported for
    a kernel that takes 0.405 ms). The timer made before candidate code calls the driver's cuCtxSynchronize, so
    replacing torch.cuda.synchronize and torch._C._cuda_synchronize afterwards changes nothing it measures."""
    from platforms.cuda._timing import CompletionCheckedTimer

    timer = _cuda_platform().make_timer()
    assert isinstance(timer, CompletionCheckedTimer)
    # the first _sleep loads its kernel lazily (about 10 ms on the H100): that was once read as a bypass
    timer.time_ms(lambda: torch.cuda._sleep(SLEEP_CYCLES))
    honest = timer.time_ms(lambda: torch.cuda._sleep(SLEEP_CYCLES))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch._C, "_cuda_synchronize", lambda *a, **k: None)
    patched = timer.time_ms(lambda: torch.cuda._sleep(SLEEP_CYCLES))
    _save("detect_timer_binding", {"honest_ms": honest, "with_sync_replaced_ms": patched})
    assert patched > 0.8 * honest, (honest, patched)


def test_end_timestamp_before_completion_fails():
    """A timer whose synchronization does nothing (what a skipped sync looks like from inside): the event recorded
    after the call has not completed when the end timestamp is taken, so the timing fails instead of reporting."""
    from kforge_core.platform import TimingIntegrityError
    from platforms.cuda._timing import CompletionCheckedTimer

    platform = _cuda_platform()
    timer = CompletionCheckedTimer(lambda: None, torch._C._CudaEventBase.query)
    with pytest.raises(TimingIntegrityError, match="before the timed call's work had completed"):
        timer.time_ms(lambda: torch.cuda._sleep(SLEEP_CYCLES))
    platform.synchronize()


def test_memory_introspection_is_refused():
    """torch.cuda.memory_snapshot() gave the kept reference outputs' addresses: refused statically (by value)."""
    src = EXAMPLE.replace("        x = x.contiguous()\n", "        blocks = torch.cuda.memory_snapshot()\n"
                          "        x = x.contiguous()\n", 1)
    v = _evaluate(SWISH, src, "cuda", timing=False)
    assert v.status == "rejected" and "memory_snapshot" in v.reason, (v.status, v.reason)


OPEN_IN_HOST = (CANDIDATES / "cuda_load_inline.py").read_text().replace(
    "torch::Tensor swish_bias_cuda(torch::Tensor x, torch::Tensor bias) {\n",
    "#include <fcntl.h>\n#define GLUE(a, b) a##b\n"
    "torch::Tensor swish_bias_cuda(torch::Tensor x, torch::Tensor bias) {\n"
    "    static int fd = GLUE(op, en)(\"/etc/hostname\", 0);\n", 1)


def test_cuda_load_inline_host_code_is_vetted_by_allow_list():
    """The blanket allowance that let CUDA builds through also let a CUDA extension call open unseen: the
    candidate's own objects (not the statically linked runtime) are vetted now, so honest CUDA builds pass and a
    token-pasted open() in host code does not."""
    honest = _evaluate(SWISH, CANDIDATES / "cuda_load_inline.py", "cuda", timing=False)
    hostile = _evaluate(SWISH, OPEN_IN_HOST, "cuda", timing=False)
    _save("detect_cuda_load_inline", {"honest": [honest.status, honest.reason[:300]],
                                      "open_in_host": [hostile.status, hostile.reason[:300]]})
    assert honest.status == "correct", (honest.reason, honest.log_tail)
    assert hostile.status == "rejected" and "open" in hostile.reason, (hostile.status, hostile.reason)


DECORATIVE = EXAMPLE.replace("        return out\n", "        return x * torch.sigmoid(x) + self.bias\n", 1)


def test_custom_share_from_the_profile():
    """Every CUDA verdict carries the profiled share of the forward's device time in the candidate's own kernels:
    high for the example, low (with ATen compute of the reference's kind flagged) for a forward that launches its
    kernel and returns PyTorch's answer."""
    honest = _evaluate(SWISH, EXAMPLE, "cuda")
    decorative = _evaluate(SWISH, DECORATIVE, "cuda")
    _save("detect_custom_share", {n: {"status": v.status, "custom_share": v.custom_share,
                                      "detail": v.custom_share_detail, "aten_compute": v.aten_compute,
                                      "candidate_ms": v.candidate_ms}
                                  for n, v in (("honest", honest), ("decorative", decorative))})
    assert honest.status == "correct", (honest.reason, honest.log_tail)
    assert honest.custom_share is not None and honest.custom_share > 0.5, honest.custom_share_detail
    assert honest.aten_compute == []
    assert decorative.status == "correct", decorative.reason
    assert {"aten::sigmoid", "aten::mul"} <= set(decorative.aten_compute), decorative.aten_compute
    assert decorative.custom_share is not None and decorative.custom_share < honest.custom_share
