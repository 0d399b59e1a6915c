"""The correctness protocol. Each step names the published trick it defeats (shared/EVAL_PITFALLS.md).

For every seed (at least 5), one seed at a time, with fresh random inputs:
1. the candidate's copy of the inputs is made (a clone; for a candidate in its own process, written straight into
   the arena it reads them from: `candidate_calls.candidate_copy`) and fingerprinted (in a process of its own, the
   candidate's process fingerprints the copy it reads there, on its device), then the reference runs on the
   originals (which are freed after); its outputs are held, not copied, until compared, then overwritten (NaN, or
   inverted bits for integers) before they are freed, so no freed memory holds the answer;
2. memory of the outputs' sizes is allocated, filled with NaN and freed (poisoning) in the process the candidate
   runs in, so a candidate that returns an unwritten buffer, or the reference's stale output buffer, returns NaN
   (stale buffers, unwritten tails);
3. the candidate runs on its copy, after the reference (stale buffers again), with the launch counter reset;
   it must have launched at least one kernel it compiled (pure-PyTorch "kernels");
4. the candidate's inputs must be unchanged afterwards (same fingerprint: mutated inputs);
5. every output is compared (count, shape, dtype, values; NaN/Inf never pass; a constant output for a reference
   whose values are small next to atol must be close in relative L2 too: zero outputs on tiny values).
Both run right after the same RNG seed (the policy for problems that draw random numbers, such as Dropout in
training mode: a candidate matches by drawing the same numbers through torch's generator in the same order).
Then, once: the inputs of the last call are overwritten in place with new values (same addresses; the reference
runs on the judge's own copy of them) and the candidate must follow them (caching by input address or by shape),
and candidate outputs must differ across seeds
whenever the reference's do (constant outputs; compared by fingerprint, so no seed's outputs are kept).

Memory: at most the inputs twice (during the reference's call), or the inputs once and the outputs three times
(the candidate's copy, the reference's outputs and the poisoning), besides the models and their own working memory;
a seed's inputs are freed before the next seed's are made. With the candidate in its own process the judge holds
less: the candidate's copy is the arena's and the poisoning is the other process's, so at most the inputs and the
reference's outputs, or the reference's and the candidate's outputs, besides the arena (inputs + outputs).

After every candidate call `after_call()` runs (the caller checks that no global torch state, hook, mode or
patched function was left behind, before the harness computes anything else), and the outputs are checked to be
memory a compiled kernel was handed or returned; if none is, the verdict carries a warning (a do-nothing kernel
beside a PyTorch computation satisfies must-launch: launch counting alone cannot tell). Work, not launches, is what
the verdict then reports: the ATen ops the first call dispatched (compute of the reference's kind inside the
candidate) and, on the other calls, the time spent inside its compiled kernels against the forward's time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from time import perf_counter_ns as _clock  # bound at import, before any candidate code
from typing import Callable

import torch

from . import context, guards, launches, progress, watchdog
from .compare import compare_outputs, fingerprint, flatten
from .loading import tensor_bytes
from .candidate_calls import (candidate_copy, fresh_rng_seed, input_print, inputs_modified, poison_for_call,
                              seed_for_call)


@dataclass
class CorrectnessResult:
    status: str  # "correct" | "incorrect" | "rejected"
    reason: str
    checks: list[dict] = field(default_factory=list)
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    launches: dict[str, int] = field(default_factory=dict)  # summed over `launch_calls` checked forward calls
    launch_calls: int = 0
    warnings: list[str] = field(default_factory=list)
    forward_ns: int = 0  # checked candidate calls: wall time of the forward calls
    kernel_ns: int = 0  # ... and the time spent inside its compiled kernels' calls
    aten_ops: set[str] = field(default_factory=set)  # ATen ops its forward dispatched (first checked call)


class Fail(Exception):
    def __init__(self, status: str, reason: str):
        self.status, self.reason = status, reason


def held_elsewhere(t: torch.Tensor) -> bool:
    """Whether anything besides this tensor holds its memory (a parameter, an input, a cached buffer); True where
    it cannot be told."""
    try:
        return torch._C._storage_Use_Count(t.untyped_storage()._cdata) > 2  # this tensor + our storage handle
    except (AttributeError, RuntimeError):
        return True


def scrub(outputs) -> None:
    """Overwrite output buffers nothing else holds (the values were cloned first): a candidate that returns
    unwritten memory can then never receive the reference's answer (stale buffers). Buffers shared with anything
    else (a parameter, an input, a cached tensor) are left alone."""
    for t in flatten(outputs):
        if not isinstance(t, torch.Tensor) or not t.numel() or held_elsewhere(t):
            continue
        with torch.no_grad():
            if t.is_floating_point() or t.is_complex():
                t.fill_(float("nan"))
            elif t.dtype == torch.bool:
                t.logical_not_()
            else:
                t.bitwise_not_()


def _sizes(outputs) -> list[int]:
    return [tensor_bytes(t) for t in flatten(outputs) if isinstance(t, torch.Tensor)]


def outputs_from_kernels(outputs, touched: list[tuple[int, int]]) -> bool | None:
    """Whether any output tensor shares memory with a tensor a compiled kernel was handed or returned; None when
    the compile helpers reported nothing (they do not track it) or there is no tensor output."""
    if not touched:
        return None
    spans = []
    for t in flatten(outputs):
        if isinstance(t, torch.Tensor) and t.numel():
            storage = t.untyped_storage()
            spans.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    if not spans:
        return None
    return any(start < p + max(n, 1) and p < end for start, end in spans for p, n in touched)


def _rewrite_in_place(inputs, fresh) -> list:
    """Copy the values of `fresh` into the tensors of `inputs` (same addresses), and return the reference's copy
    of the result: `inputs`' structure and values, with tensors of the judge's own (`fresh`'s, or a copy of what
    was written where `copy_` converted) -- never read back from `inputs`, which for a candidate in its own
    process is memory that process can write."""
    own = {}
    for dst, src in zip(flatten(inputs), flatten(fresh)):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)
            same = isinstance(src, torch.Tensor) and src.shape == dst.shape and src.dtype == dst.dtype
            own[id(dst)] = src if same else torch.empty(dst.shape, dtype=dst.dtype, device=src.device).copy_(src)
    return list(_with_tensors(inputs, own))


def _with_tensors(x, own: dict):
    """`x` with each tensor replaced by own[id(tensor)] (a copy where there is none). A module-level function,
    not a closure: a recursive closure is a reference cycle that would keep `own`'s tensors alive until the
    garbage collector runs."""
    if isinstance(x, torch.Tensor):
        return own[id(x)] if id(x) in own else x.detach().clone()  # not rewritten (fresh had fewer)
    if isinstance(x, (list, tuple)):
        return type(x)(_with_tensors(y, own) for y in x)
    return x


def check_correctness(ref_model, new_model, make_inputs: Callable[[int], list], policy, platform,
                      seeds: list[int], after_call: Callable[[], None] | None = None) -> CorrectnessResult:
    res = CorrectnessResult("correct", "")
    checks = res.checks
    provenance: list[bool | None] = []
    recorded: list[bool] = []

    def run(model, inputs, rng_seed: int):
        seed_for_call(platform, model, rng_seed)  # the same random numbers for both (Dropout, ...)
        with torch.no_grad():
            out = model(*inputs)
        platform.synchronize()
        return out

    def run_candidate(inputs, rng_seed: int):
        with watchdog.limit(context.call_limit_s, "a checked forward call"):
            return run(new_model, inputs, rng_seed)

    def candidate_call(inputs, rng_seed: int, what: str):
        launches.reset()
        if not recorded:
            # the first call: which ATen ops run inside the candidate's forward (compute of the reference's kind);
            # not counted in the custom-kernel share (the recording slows every ATen op down)
            recorded.append(True)
            out = guards.record_ops(lambda: run_candidate(inputs, rng_seed), res.aten_ops)
        else:
            kernel_before, start = launches.kernel_ns(), _clock()
            out = run_candidate(inputs, rng_seed)
            res.forward_ns += _clock() - start
            res.kernel_ns += launches.kernel_ns() - kernel_before
        if after_call is not None:
            after_call()
        n = launches.total()
        provenance.append(outputs_from_kernels(out, launches.touched()))
        for k, v in launches.snapshot().items():
            res.launches[k] = res.launches.get(k, 0) + v
        res.launch_calls += 1
        if n == 0:
            raise Fail("rejected", f"ModelNew ran no kernel it compiled ({what}); a pure-PyTorch forward is not a "
                                   f"custom kernel [rule must-launch]")
        return out

    zero = []  # per checked call: every output, the candidate's and the reference's, identically zero

    def compare(got, want, what: str):
        c = compare_outputs(got, want, policy)
        res.max_abs_error = max(res.max_abs_error, c.max_abs_error)
        res.max_rel_error = max(res.max_rel_error, c.max_rel_error)
        if not c.passed:
            raise Fail("incorrect", f"{what}: {c.detail}")
        zero.append(c.zero)
        if c.notes and not any(w.startswith("within tolerance only absolutely") for w in res.warnings):
            res.warnings.append(f"within tolerance only absolutely ({what}): {c.notes[0]}")
        return c

    def check(inputs, cand_inputs, rng_seed: int, what: str):
        """The reference on `inputs` (consumed: freed before the candidate runs), the candidate on `cand_inputs`;
        returns the fingerprints of both outputs."""
        pristine = input_print(new_model, cand_inputs)
        ref_out = run(ref_model, inputs, rng_seed)
        inputs.clear()  # the reference's copy (possibly written by it) is not needed again
        poison_for_call(platform, new_model, _sizes(ref_out) * 2)
        cand_out = candidate_call(cand_inputs, rng_seed, what)
        if inputs_modified(new_model, cand_inputs, pristine):
            raise Fail("incorrect", f"{what}: ModelNew modified its inputs in place [rule no-input-mutation]")
        c = compare(cand_out, ref_out, what)
        prints = fingerprint(ref_out), fingerprint(cand_out)
        scrub(ref_out)
        platform.synchronize()
        return c, prints

    ref_seen: list = []
    cand_seen: list = []
    try:
        last_inputs = None
        for k, seed in enumerate(seeds):
            progress.stage(f"checking seed {k + 1}/{len(seeds)}", seed=k + 1, of=len(seeds))
            last_inputs = None  # the previous seed's inputs go before this seed's are made
            inputs = list(make_inputs(seed))
            last_inputs = candidate_copy(new_model, inputs)
            c, (ref_print, cand_print) = check(inputs, last_inputs, fresh_rng_seed(), f"seed {seed}")
            checks.append({"name": f"seed {seed}", "passed": True, "detail": c.detail})
            ref_seen.append(ref_print)
            cand_seen.append(cand_print)
            del inputs, c

        # Same addresses, new values: a result cached by data pointer or shape now goes stale.
        check(_rewrite_in_place(last_inputs, make_inputs(seeds[-1] + 7919)), last_inputs, fresh_rng_seed(),
              "inputs rewritten in place at the same addresses (result caching)")
        checks.append({"name": "in-place rewrite of inputs", "passed": True, "detail": "outputs follow new values"})
        del last_inputs

        ref_varies = any(r != ref_seen[0] for r in ref_seen[1:])
        cand_varies = any(r != cand_seen[0] for r in cand_seen[1:])
        if ref_varies and not cand_varies:
            raise Fail("incorrect", "ModelNew returns the same output for every input while the reference does not")
        checks.append({"name": "outputs change with inputs", "passed": True,
                       "detail": "yes" if ref_varies else "the reference itself does not vary (degenerate problem)"})
        if zero and all(zero):
            res.warnings.append("correct only as zeros: ModelNew's output and the reference's were identically zero "
                                "on every checked input (the problem's output collapses to zeros), so this verdict "
                                "says nothing about whether ModelNew computes the operation")
        if provenance and all(p is False for p in provenance):
            res.warnings.append("no output of ModelNew was written by a kernel it compiled (its outputs share no "
                                "memory with any tensor its kernels were handed or returned): the kernel launches "
                                "may be decorative while PyTorch computes the result [rule must-launch]")
    except Fail as f:
        res.status, res.reason = f.status, f.reason
        checks.append({"name": "failed", "passed": False, "detail": f.reason})
        return res
    res.reason = (f"correct on {len(seeds)} seeds and an in-place input rewrite; max abs error "
                  f"{res.max_abs_error:.3g}")
    return res
