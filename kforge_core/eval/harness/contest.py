"""Head to head: several correct candidates of one run re-timed in one evaluation child, interleaved trial by trial
with each other and the baselines on the same fresh inputs, so "best" compares numbers measured side by side
instead of medians from separate, differently noisy evaluations.

Each contender was judged correct on its own before; here every timed output of each one is still checked against
eager's on the same inputs (and must launch a kernel it compiled), so a contender that changed behaviour fails
the contest. Request: {"mode": "head_to_head", "contenders": ["c12", "c7", ...]} with files `<name>.py`.
"""

from __future__ import annotations

import random
from pathlib import Path

from ...errors import CompileError
from ..rules import check_candidate
from ..tolerance import get_policy
from . import context, guards, progress
from .compare import compare_outputs, fingerprint
from .loading import candidate_class, clone, import_file
from .timing import RemoteModel, TimingOptions, time_models


class ContestFailure(Exception):
    pass


def run_contest(request: dict, workdir: Path, platform, timer, state, ref_model, init, make_inputs) -> dict:
    from .run import _copy_matching_weights, _guard_findings, _raise_guard_findings, _seeded

    names = [str(n) for n in request.get("contenders", [])]
    if not 2 <= len(names) <= 8:
        return {"status": "runtime_error", "reason": "a head-to-head needs 2 to 8 contenders"}
    models: dict[str, object] = {}
    try:
        for name in names:
            progress.stage(f"building contender {name}")
            path = workdir / f"{name}.py"
            source = path.read_text()
            if check_candidate(source, platform.module_name, platform.candidate_api,
                               allow_inline_asm=getattr(platform, "allows_inline_asm", False)):
                raise ContestFailure(f"{name}: breaks a static rule")
            context.set_candidate(path)
            state.update(guards.snapshot_state())
            cls = candidate_class(import_file(path, f"kforge_contender_{name}"))
            model = _seeded(platform, 0, lambda: cls(*clone(init))).to(platform.device())
            found = _guard_findings(state)
            if found:
                raise ContestFailure(f"{name}: {found}")
            _copy_matching_weights(ref_model, model)
            model.train(ref_model.training)
            models[name] = model
    except (ContestFailure, CompileError, guards.GuardViolation) as e:
        return {"status": "runtime_error", "reason": f"head-to-head: {e}"}
    except BaseException as e:  # noqa: BLE001 - candidate code
        return {"status": "runtime_error", "reason": f"head-to-head: loading a contender raised {type(e).__name__}: {e}"}
    models["eager"] = ref_model
    if request.get("remote_compiled") and progress.relay_available():
        models["compiled"] = RemoteModel(progress.relay)
    policy = get_policy(request.get("tolerance", "default"))

    def verify(what, inputs, pristine, outputs, launched) -> None:
        _raise_guard_findings(state, identities=False)
        if fingerprint(inputs) != pristine:
            raise ContestFailure(f"a contender modified its inputs in {what}")
        for name in names:
            if name not in outputs:
                continue
            if launched.get(name, 0) == 0:
                raise ContestFailure(f"{name} ran no kernel it compiled in {what}")
            if "eager" in outputs and not compare_outputs(outputs[name], outputs["eager"], policy).passed:
                raise ContestFailure(f"{name}'s output of {what} is wrong")

    progress.stage("timing head to head", contenders=len(names))
    opts = TimingOptions(**request.get("timing_options", {}))
    try:
        summaries = time_models(models, make_inputs, platform, timer, opts, random.Random(), verify=verify)
    except (ContestFailure, guards.GuardViolation) as e:
        return {"status": "runtime_error", "reason": f"head-to-head: {e}"}
    except BaseException as e:  # noqa: BLE001 - candidate code
        return {"status": "runtime_error", "reason": f"head-to-head: timing raised {type(e).__name__}: {e}"}
    return {"status": "correct", "reason": "head-to-head timed", "contest": summaries,
            "device": platform.device_name(), "target": platform.name}

