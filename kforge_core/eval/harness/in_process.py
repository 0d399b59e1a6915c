"""The candidate in the harness's own process: importing it and building ModelNew, the guard findings checked
around its calls, its profile, and how its exceptions are described in a verdict.

Used where the candidate runs beside the checks (the candidate's process `harness.worker`, the one-process harness
of `KFORGE_JUDGE=0`, a contest without a judge); `harness.remote.RemoteCandidate` is the judge's view of a
candidate in a process of its own.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

import torch

from ...errors import CompileError
from . import footprint, guards, launches
from .loading import CandidateShapeError, candidate_class, clone, import_file
from .reference import _seeded


class InProcess:
    """The checks made around the candidate when it runs in this very process (no judge split: `KFORGE_JUDGE=0`,
    head-to-head contests, platforms without the split); `harness.remote.RemoteCandidate` answers the same calls
    when the candidate runs in a process of its own."""

    def __init__(self, state: dict, platform, make_inputs):
        self.state, self.platform, self.make_inputs = state, platform, make_inputs

    def after_call(self) -> None:
        raise_guard_findings(self.state, registrations=False)

    def check_between_calls(self) -> None:
        raise_guard_findings(self.state, identities=False)

    def findings(self, identities: bool = True) -> str:
        return guard_findings(self.state, identities)

    def profile(self, model, share_only: bool = False):
        return profile_candidate(self.platform, model, self.make_inputs, share_only)

    def resnapshot(self) -> None:
        """Our own code ran (torch.compile, lazy imports): what it changed is not the candidate's doing."""
        self.state.update(guards.snapshot_state(registrations=False))


def load_candidate(cand_path: Path, platform, state: dict, init: list, ref_model) -> tuple[object | None, dict]:
    """Import the candidate and build ModelNew: (model, {"build_s", "builds"}), or (None, verdict fields) when it
    fails or breaks a guard. Runs in the process that will run the candidate (the worker, or the one-process
    harness)."""
    # What the candidate must leave as it found it, taken after the problem's own imports (a problem may set
    # torch flags legitimately) and right before the first line of candidate code runs.
    state.update(guards.snapshot_state())
    build_start = time.perf_counter()
    try:
        cand_module = import_file(cand_path, "kforge_candidate")
        cls = candidate_class(cand_module)
        # its own copy of the init arguments: tensors among them are shared with the reference's constructor
        new_model = _seeded(platform, 0, lambda: cls(*clone(init))).to(platform.device())
    except CompileError as e:
        return None, {"status": "compile_error", "reason": str(e), "compile_log": e.log,
                      "builds": list(launches.builds)}
    except guards.GuardViolation as e:
        return None, {"status": "rejected", "reason": str(e)}
    except CandidateShapeError as e:
        return None, {"status": "runtime_error", "reason": str(e)}
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt from candidate code too
        return None, {"status": "runtime_error",
                      "reason": describe_exception("loading the candidate", e, str(cand_path))}
    loaded = {"build_s": time.perf_counter() - build_start, "builds": launches.builds}
    rejected = guard_findings(state)  # hooks, modes, patches installed at import time
    if rejected:
        return None, {"status": "rejected", "reason": rejected, **loaded}
    copy_matching_weights(ref_model, new_model)
    new_model.train(ref_model.training)
    return new_model, loaded


def copy_matching_weights(ref_model, new_model) -> None:
    """Same seed already gives the same init in KernelBench; copying matching state makes it independent of
    construction order. Only when every key and shape matches."""
    ref_sd, new_sd = ref_model.state_dict(), new_model.state_dict()
    if ref_sd and ref_sd.keys() == new_sd.keys() and all(ref_sd[k].shape == new_sd[k].shape for k in ref_sd):
        with torch.no_grad():
            new_model.load_state_dict(ref_sd)


def guard_findings(state: dict, identities: bool = True, registrations: bool | None = None) -> str:
    if guards.disarmed():
        return ""
    if guards.violations:
        v = guards.violations[0]
        return v if "[rule " in v else f"{v} [rule no-threads / sandbox]"
    changed = guards.changed_state(state, identities, registrations)
    if changed:
        more = f" (+{len(changed) - 8} more)" if len(changed) > 8 else ""
        return f"candidate changed {', '.join(changed[:8])}{more} (patched functions, hooks, modes or torch " \
               f"settings left behind) [rule no-patching]"
    return ""


def raise_guard_findings(state: dict, identities: bool = True, registrations: bool | None = None) -> None:
    """After each candidate call, before the harness computes anything with torch again."""
    found = guard_findings(state, identities, registrations)
    if found:
        raise guards.GuardViolation(found)


def candidate_frames(exc: BaseException, candidate_file: str) -> str:
    """The traceback lines that point into the candidate, as 'candidate line N: code'."""
    frames = traceback.extract_tb(exc.__traceback__)
    lines = [f"candidate line {f.lineno}: {(f.line or '').strip()}" for f in frames if f.filename == candidate_file]
    return "; ".join(lines[-3:])


def describe_exception(where: str, e: BaseException, cand_file: str, memory=None) -> str:
    frames = candidate_frames(e, cand_file)
    msg = str(e).strip().splitlines()
    text = f"{where} raised {type(e).__name__}: {msg[0][:400] if msg else ''}"
    if footprint.out_of_memory(e):
        text += " — it ran out of memory (the evaluation's memory limit)"
        if memory is not None:
            text += (f"; the problem's own tensors take {memory.sizes.live / footprint.GiB:.3g} GiB "
                     f"({memory.sizes.describe()}), the evaluation needs about "
                     f"{memory.sizes.needed() / footprint.GiB:.3g} GiB besides ModelNew's own memory")
    if isinstance(e, SystemExit):
        text += " — candidate code may not exit the evaluation"
    return f"{text} ({frames})" if frames else text


def profile_candidate(platform, new_model, make_inputs, share_only: bool = False):
    """The platform's profile of the candidate (a dict), or with `share_only` just its custom-kernel share."""
    if not platform.has_profiler:
        return None
    inputs = make_inputs(0)

    def call():
        with guards.untrusted(), torch.no_grad():  # candidate code stays guarded inside the trusted profiler
            new_model(*inputs)

    try:
        with guards.trusted():
            return platform.custom_share(call) if share_only else platform.profile(call)
    except Exception as e:  # noqa: BLE001 - a profiler failure must not cost the verdict
        return None if share_only else {"error": f"profiler failed: {type(e).__name__}: {e}"}
