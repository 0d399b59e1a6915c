"""Head to head: several correct candidates of one run re-timed in one evaluation, interleaved trial by trial with
each other and the baselines on the same fresh inputs, so "best" compares numbers measured side by side instead of
medians from separate, differently noisy evaluations.

Judged (the default on Linux, `kforge_core.eval.judged`): this process is the judge and never imports a contender;
each contender runs in a candidate's process of its own (its own namespaces, guards and CPU probe), answering the
same requests as in an evaluation. Times, comparisons and the checks on reported numbers (`remote.timing_check`,
`cpu_check`) are the judge's, per contender. With `KFORGE_JUDGE=0` every contender is imported here.

Each contender was judged correct on its own before; here every timed output of each one is still checked against
eager's on the same inputs (and must launch a kernel it compiled), so a contender that changed behaviour fails
the contest. Request: {"mode": "head_to_head", "contenders": ["c12", "c7", ...]} with files `<name>.py`. Result:
{"contest": {name, "eager"[, "compiled"]: {median_ms, min_ms, max_ms, trials}}, "per_contender": {name: {"checks",
"warnings"}} (the checks each one passed, what the judge flagged about it), "checks" (the judge's, named per
contender), "judged"}.
"""

from __future__ import annotations

import random
from pathlib import Path

from ...errors import CompileError
from ..rules import check_candidate
from ..tolerance import get_policy
from . import conditions, context, guards, progress
from .compare import compare_outputs, fingerprint
from .in_process import copy_matching_weights, guard_findings, raise_guard_findings
from .loading import candidate_class, clone, import_file
from .reference import _seeded
from .remote import RemoteCandidate, RemoteFailure
from .timing import RemoteModel, TimingOptions, compiled_plan, time_models


class ContestFailure(Exception):
    pass


def run_contest(request: dict, workdir: Path, platform, timer, state, ref_model, init, make_inputs,
                remotes: dict | None = None, memory=None) -> dict:
    """`remotes` ({name: RemoteCandidate}, the judge of a judged contest): each contender runs in its own
    candidate's process and this process never imports one; without them (KFORGE_JUDGE=0), every contender is
    imported here, beside the eager reference."""
    names = [str(n) for n in request.get("contenders", [])]
    if not 2 <= len(names) <= 8:
        return {"status": "runtime_error", "reason": "a head-to-head needs 2 to 8 contenders"}
    judged = bool(remotes)
    if judged and set(remotes) != set(names):
        return {"status": "runtime_error", "reason": "head-to-head: a contender's process is missing"}
    models: dict[str, object] = {}
    try:
        for name in names:
            progress.stage(f"building contender {name}")
            path = workdir / f"{name}.py"
            source = path.read_text()
            if not guards.disarmed() and check_candidate(source, platform.module_name, platform.candidate_api,
                                                         allow_inline_asm=getattr(platform, "allows_inline_asm",
                                                                                  False)):
                raise ContestFailure(f"{name}: breaks a static rule")
            if judged:
                models[name] = _load_remote(name, remotes[name], memory)
                continue
            context.set_candidate(path)
            state.update(guards.snapshot_state())
            cls = candidate_class(import_file(path, f"kforge_contender_{name}"))
            model = _seeded(platform, 0, lambda: cls(*clone(init))).to(platform.device())
            found = guard_findings(state)
            if found:
                raise ContestFailure(f"{name}: {found}")
            copy_matching_weights(ref_model, model)
            model.train(ref_model.training)
            models[name] = model
    except (ContestFailure, CompileError, guards.GuardViolation, RemoteFailure) as e:
        return {"status": "runtime_error", "reason": f"head-to-head: {e}"}
    except BaseException as e:  # noqa: BLE001 - candidate code
        return {"status": "runtime_error", "reason": f"head-to-head: loading a contender raised {type(e).__name__}: {e}"}
    models["eager"] = ref_model
    # the run's server only (a contest never compiles its own); asked here where the caller said "ask", so that a
    # build still under way is waited for once every contender has loaded
    plan = compiled_plan(request)
    if plan["compiled"] == "shared":
        models["compiled"] = RemoteModel(progress.relay)
    policy = get_policy(request.get("tolerance", "default"))
    compared = dict.fromkeys(names, 0)  # per contender: calls whose output was compared with eager's

    def verify(what, inputs, pristine, outputs, launched) -> None:
        if judged:
            for name in names:
                if name in outputs:
                    remotes[name].check_between_calls()
        else:
            raise_guard_findings(state, identities=False)
        if fingerprint(inputs) != pristine or \
                any(getattr((remotes or {}).get(n), "inputs_changed", False) for n in names if n in outputs):
            raise ContestFailure(f"a contender modified its inputs in {what}")
        for name in names:
            if name not in outputs:
                continue
            if launched.get(name, 0) == 0:
                raise ContestFailure(f"{name} ran no kernel it compiled in {what}")
            if "eager" in outputs:
                if not compare_outputs(outputs[name], outputs["eager"], policy).passed:
                    raise ContestFailure(f"{name}'s output of {what} is wrong")
                compared[name] += 1

    progress.stage("timing head to head", contenders=len(names))
    opts = TimingOptions(**request.get("timing_options", {}))
    watches = [r.cpu for r in (remotes or {}).values() if r.cpu is not None]
    try:
        for watch in watches:
            watch.start()
        try:
            summaries = time_models(models, make_inputs, platform, timer, opts, random.Random(), verify=verify)
        finally:
            for watch in watches:
                watch.stop()
        judge = _judge_contenders(remotes, platform) if judged else {}
    except (ContestFailure, guards.GuardViolation) as e:
        return {"status": "runtime_error", "reason": f"head-to-head: {e}"}
    except RemoteFailure as e:
        return {"status": "runtime_error", "reason": f"head-to-head: {e.reason}"}
    except BaseException as e:  # noqa: BLE001 - candidate code
        return {"status": "runtime_error", "reason": f"head-to-head: timing raised {type(e).__name__}: {e}"}
    per = _contest_checks(names, compared, {n: remotes[n].handover for n in names} if judged else None)
    mine = conditions.read()
    for name in names:  # as a verdict states them: each contender's process, eager's and the compiled baseline's
        check, warning = conditions.check_timed("the contender's process (reported)",
                                                remotes[name].conditions if judged else mine, "compiled" in models,
                                                plan.get("conditions"))
        per[name]["checks"].append(check)
        per[name]["warnings"] += [warning] if warning else []
    for name, (checks, warnings) in judge.items():
        per[name]["checks"] += checks
        per[name]["warnings"] += warnings
    out = {"status": "correct", "reason": "head-to-head timed", "contest": summaries,
           "checks": [{**c, "name": f"{name}: {c['name']}"} for name, (checks, _) in judge.items() for c in checks],
           "per_contender": per, "device": platform.device_name(), "target": platform.name, "judged": judged}
    if guards.disarmed():
        out["warnings"] = [f"static rules and guards disarmed ({guards.DISARM_VARIABLE}=1)"]
    return out


def _load_remote(name: str, remote: RemoteCandidate, memory):
    """A contender in its own process: built there; the judge keeps a handle."""
    model, loaded = remote.load()
    if model is None:
        raise ContestFailure(f"{name}: {loaded.get('reason') or loaded.get('status')}")
    if memory is not None:
        remote.expect_output_bytes(memory.sizes.outputs, 1)
        context.call_limit_s += remote.transfer_allowance_s(memory.sizes.inputs + memory.sizes.outputs)
    return model


def _contest_checks(names: list[str], compared: dict[str, int], crossed: dict[str, str] | None) -> dict[str, dict]:
    """{name: {"checks", "warnings"}}: what every contender passed on every call of a finished contest (a failure
    ends the contest instead). Rules and guards disarmed (a test of the judge): only the checks that still ran.
    `crossed` (judged contests only): how each contender's tensors crossed to its process."""
    judged = crossed is not None
    where = "its own process's, after every call and in full after timing" if judged else \
        "this process's (shared by every contender and eager), after every call"
    out = {}
    for name in names:
        checks = [{"name": "timed outputs match eager", "passed": True,
                   "detail": f"each of its {compared[name]} calls compared with eager PyTorch's output on the same "
                             f"fresh inputs"},
                  {"name": "must-launch", "passed": True, "detail": "a kernel it compiled ran in every call"},
                  {"name": "inputs unmodified", "passed": True, "detail": "the inputs' fingerprint unchanged by every "
                                                                          "trial"}]
        if not guards.disarmed():
            checks += [{"name": "static rules", "passed": True, "detail": "its source re-checked before the contest"},
                       {"name": "guards", "passed": True, "detail": where}]
        if judged:
            checks.append({"name": "judged out of process", "passed": True,
                           "detail": "inputs, eager's outputs, the comparisons and every time kept by a judge that "
                                     "never imported a contender" +
                                     (f"; tensors crossed {crossed[name]}" if crossed.get(name) else "")})
        out[name] = {"checks": checks, "warnings": []}
    return out


def _judge_contenders(remotes: dict, platform) -> dict[str, tuple[list[dict], list[str]]]:
    """After timing, per contender: the full guard check, its reported times against the judge's clock and the
    CPU readings, and the deferred-work check: {name: (checks, warnings)}. A contender failing any of them fails
    the contest; what the judge could only flag (its clock on a busy CPU box) is that contender's warning."""
    out = {}
    for name, remote in remotes.items():
        found = remote.findings()
        if found:
            raise ContestFailure(f"{name}: {found}")
        try:
            check, warning = remote.timing_check(strict=platform.device_type != "cpu")
        except RemoteFailure as e:
            raise ContestFailure(f"{name}: {e.reason}") from None
        checks, warnings = [check], [warning] if warning else []
        deferred = remote.cpu_check()
        if deferred is not None:
            checks.append(deferred[0])
            if deferred[1]:
                raise ContestFailure(f"{name}: {deferred[1]}")
        out[name] = (checks, warnings)
    return out
