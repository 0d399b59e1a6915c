"""One evaluation inside the child: load, check statically, import, verify, time, profile. Returns a verdict dict.

Problem failures come back as {"problem_error": ...} (the caller raises ProblemError); candidate failures come back
as verdicts. The candidate's exceptions are data, never crashes of the harness.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from ...errors import CompileError
from ...platform import TimingIntegrityError, get_platform
from ..rules import check_candidate
from ..tolerance import get_policy
from . import conditions, context, footprint, guards, launches, progress, watchdog, work
from .compare import compare_outputs, fingerprint
from .contest import run_contest
from .correctness import check_correctness
from .in_process import InProcess, describe_exception, load_candidate
from .reference import ProblemFailure, _load_reference, _reference_checks
from .remote import RemoteFailure, connect
from .timing import RemoteModel, compile_baseline, compiled_plan, options_for, time_models, timer_overheads


def _verdict(status: str, reason: str, **extra) -> dict:
    return {"status": status, "reason": reason, **extra}


def run(request: dict, workdir: Path) -> dict:
    platform = get_platform(request["target"])
    context.request = dict(request)
    with guards.trusted():
        platform.prepare_child()
    timer = platform.make_timer()  # binds the clock now, before any problem or candidate code exists
    state = guards.snapshot_state(registrations=False)  # the dispatcher's are taken right before the import
    # the judge's handle on the candidate's process, when the caller started one (made before the guards, which
    # refuse new sockets)
    remote = connect(request, platform.device())
    # a contest's judge: one candidate's process per contender (`peer_fd_<name>`)
    contenders = {str(n): connect(request, platform.device(), str(n)) for n in request.get("contenders", [])} \
        if request.get("mode") == "head_to_head" else {}
    for judged in [remote, *contenders.values()]:
        if judged is not None:  # what the timer itself spends around a call is not the candidate's (remote.py)
            judged.timer_overhead_ms, judged.timer_cpu_ms = timer_overheads(timer)
    guards.install()
    try:
        verdict = _run(request, workdir, platform, timer, state, remote,
                       {n: r for n, r in contenders.items() if r is not None})
        if remote is not None and isinstance(verdict.get("memory"), dict):
            # the candidate's process's own account, once the verdict is decided (nothing in it is judged)
            verdict["memory"] = {**verdict["memory"], "candidate_process": remote.memory_report()}
            if isinstance(verdict.get("reported_by_candidate"), list):
                verdict["reported_by_candidate"].append("memory.candidate_process")
        return verdict
    except ProblemFailure as e:
        return {"problem_error": str(e), "status": "runtime_error", "reason": str(e)}
    finally:
        for r in [remote, *contenders.values()]:
            if r is not None:
                r.close()


def _run(request: dict, workdir: Path, platform, timer, state, remote=None, contenders=None) -> dict:
    progress.stage("loading the problem", pid=os.getpid())  # the process a cancel kills (with its group)
    footprint.hold_long_lived(platform)  # part of the process's start (made already if pre-started)
    memory = footprint.Phases(platform)
    memory.enter("reference checks")
    module, init, ref_model, make_inputs = _load_reference(request, workdir, platform)
    policy = get_policy(request.get("tolerance", "default"))
    ref_warnings, problem_info, draws_random = _reference_checks(ref_model, make_inputs, platform, policy, memory)
    problem_info["warnings"] = ref_warnings
    footprint.release(platform)
    if request.get("mode") == "head_to_head":
        return run_contest(request, workdir, platform, timer, state, ref_model, init, make_inputs,
                           remotes=contenders, memory=memory)
    if request.get("mode") == "validate":
        inputs0 = make_inputs(0)
        ms = timer.time_ms(lambda: ref_model(*inputs0))
        return {"status": "correct", "reason": "problem is valid", "problem": {**problem_info, "reference_ms": ms}}

    base = {"problem": problem_info, "warnings": list(ref_warnings), "device": platform.device_name(),
            "target": platform.name, "memory": memory.report()}
    cand_path = workdir / "candidate.py"
    source = cand_path.read_text()
    if guards.disarmed():
        base["warnings"].append(f"static rules and guards disarmed ({guards.DISARM_VARIABLE}=1): a test of the "
                                f"judge, not a verdict to keep")
    try:
        violations = [] if guards.disarmed() else \
            check_candidate(source, platform.module_name, platform.candidate_api,
                            allow_inline_asm=getattr(platform, "allows_inline_asm", False))
    except SyntaxError as e:
        return _verdict("compile_error", f"candidate line {e.lineno}: Python syntax error: {e.msg}", **base)
    if violations:
        return _verdict("rejected", "; ".join(str(v) for v in violations[:5]), **base,
                        checks=[{"name": v.rule, "passed": False, "detail": str(v)} for v in violations])

    context.set_candidate(cand_path)
    progress.stage("building the candidate")
    if remote is not None:  # the candidate's own process imports and builds it; this one never does
        remote.phase = "load"
        new_model, loaded = remote.load()
        remote.expect_output_bytes(memory.sizes.outputs, len(problem_info["outputs"]))
        context.call_limit_s += remote.transfer_allowance_s(memory.sizes.inputs + memory.sizes.outputs)
        side = remote
    else:
        new_model, loaded = load_candidate(cand_path, platform, state, init, ref_model)
        side = InProcess(state, platform, make_inputs)
    if new_model is None:
        return _verdict(**loaded, **base)
    base.update(loaded)

    base["tolerance"] = policy.to_dict()
    # Seeds the candidate cannot predict (nothing can be precomputed for them); recorded in the checks.
    first_seed = random.SystemRandom().randrange(1 << 20, 1 << 40)
    seeds = list(range(first_seed, first_seed + int(request.get("seeds", 5))))
    memory.enter("correctness")
    if remote is not None:
        remote.phase = "correctness"  # told with its next request (its memory account's phases)
    try:
        res = check_correctness(ref_model, new_model, make_inputs, policy, platform, seeds,
                                after_call=side.after_call)
    except RemoteFailure as e:
        return _verdict(e.status, e.reason, **_fields(e.extra), **base)
    except CompileError as e:
        return _verdict("compile_error", str(e), compile_log=e.log, **base)
    except guards.GuardViolation as e:
        return _verdict("rejected", str(e), **base)
    except ProblemFailure:
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt from candidate code too
        return _verdict("runtime_error", describe_exception("ModelNew.forward", e, str(cand_path), memory), **base)
    footprint.release(platform)
    base["memory"] = memory.report()
    if res.status == "incorrect" and draws_random:
        res.reason += (" (the reference draws random numbers: both run right after the same RNG seed, so ModelNew "
                       "must draw the same numbers through torch's generator, in the same order)")
    if remote is not None:  # what the candidate's forward dispatched and took was measured in its own process
        res.aten_ops, res.forward_ns = remote.aten_ops, remote.forward_ns
    base.update(checks=res.checks, max_abs_error=res.max_abs_error, max_rel_error=res.max_rel_error,
                kernel_launches=res.launches, kernel_launch_calls=res.launch_calls)
    base["warnings"].extend(res.warnings)
    try:
        rejected = side.findings()
        if rejected:
            return _verdict("rejected", rejected, **base)
        if res.status != "correct":
            return _verdict(res.status, res.reason, **base)
        checked_share = work.share(res.kernel_ns, res.forward_ns) if platform.synchronous_kernels else None
        timed_share = profiled_share = None
        if request.get("timing", True):
            memory.enter("timing")
            if remote is not None:
                remote.phase = "timing"
            try:
                timing = _time(request, ref_model, new_model, make_inputs, platform, timer, side)
            except RemoteFailure:
                raise
            except guards.GuardViolation as e:
                return _verdict("rejected", str(e), **base)
            except TimingFailure as e:
                return _verdict(e.status, e.reason, **base)
            except TimingIntegrityError as e:
                return _verdict("rejected", str(e), **base)
            except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt from candidate code too
                return _verdict("runtime_error", describe_exception("timing ModelNew", e, str(cand_path), memory),
                                **base)
            footprint.release(platform)
            base["memory"] = memory.report()
            if "failure" in timing:
                return _verdict(timing["failure"][0], timing["failure"][1], **base)
            base["warnings"].extend(timing.pop("warnings"))
            timed_share = timing.pop("custom_share_timed", None)
            base["checks"].extend(timing.pop("checks", []))
            base.update(timing)
            rejected = side.findings()
            if rejected:
                return _verdict("rejected", rejected, **base)
            if request.get("profile"):
                progress.stage("profiling")
                base["profile"] = side.profile(new_model)
                prof = base["profile"] or {}
                if platform.profiler_times_device and base.get("roofline") and prof.get("per_forward_ms"):
                    from ..roofline import with_device_time

                    base["roofline"] = with_device_time(base["roofline"], prof["per_forward_ms"],
                                                        platform.cache_bytes())
        if not platform.synchronous_kernels and platform.has_profiler:
            # asynchronous launches: only the device's own records say whose kernels did the work
            profiled_share = (base.get("profile") or {}).get("custom_share")
            if profiled_share is None:
                progress.stage("profiling its kernels' share of the device time")
                profiled_share = side.profile(new_model, share_only=True)
            rejected = side.findings()
            if rejected:
                return _verdict("rejected", rejected, **base)
    except RemoteFailure as e:
        return _verdict(e.status, e.reason, **_fields(e.extra), **base)
    except guards.GuardViolation as e:  # reported by the candidate's process
        return _verdict("rejected", str(e), **base)
    method = "time inside its compiled kernels' calls / forward time (synchronous kernels)" \
        if platform.synchronous_kernels else "profiled device time of its kernels / all device time of a forward"
    found = work.summary(checked_share, timed_share, profiled_share,
                         work.aten_compute(res.aten_ops, guards.reference_ops), method)
    base["warnings"].extend(found.pop("warnings"))
    base.update(found)
    if remote is not None:
        base["checks"].append({"name": "judged out of process", "passed": True,
                               "detail": "inputs, reference outputs, comparison, eager timing and verdict in a "
                                         "process that never imported the candidate" +
                                         (f"; tensors crossed {remote.handover}" if remote.handover else "")})
        base["reported_by_candidate"] = [k for k in REPORTED_BY_CANDIDATE if base.get(k)]
    return _verdict("correct", res.reason, **base)


# Verdict fields the judge takes from the candidate's process as its claims (it cannot measure them itself): launch
# counts and the kernel time behind custom_share (must-launch; the custom-kernel share), the ATen ops behind
# aten_compute, the build records, the profile. A forged one can hide a must-launch finding or change a share, never
# an output's correctness or a timed call's time (those are bounded by the judge's clock and the caller's CPU probe).
REPORTED_BY_CANDIDATE = ("kernel_launches", "custom_share", "custom_share_detail", "aten_compute", "builds", "build_s",
                         "profile")


def _fields(extra: dict) -> dict:
    """Verdict fields a remote failure carries (the compile log, build records); `worker_lost` is for the caller."""
    return {k: v for k, v in extra.items() if k in ("compile_log", "builds", "worker_lost")}


class TimingFailure(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def _time(request: dict, ref_model, new_model, make_inputs, platform, timer, side) -> dict:
    opts = options_for(platform.device_type, request.get("timing_options"))
    rng = random.Random()
    policy = get_policy(request.get("tolerance", "default"))
    models = {"candidate": new_model, "eager": ref_model}
    out: dict = {"warnings": [], "checks": []}
    remote = None
    # the caller's wait for the run's torch.compile baseline server, if still building, happens here: before the
    # timing phase's limit starts, after every check a failing candidate fails
    plan = compiled_plan(request) if request.get("baselines", True) else {"compiled": None}
    compiled_conditions = plan.get("conditions")
    if plan["compiled"] == "unavailable":
        out["warnings"].append(plan["reason"])
    elif plan["compiled"] == "shared":
        # the run's warm baseline, timed by the caller in its own process at this model's turn in each trial
        remote = models["compiled"] = RemoteModel(progress.relay)
    elif plan["compiled"] == "local":
        progress.stage("building the torch.compile baseline")
        with guards.trusted():
            compiled, compile_s, err = compile_baseline(ref_model, make_inputs(0), platform)
        if compiled is not None:
            models["compiled"] = compiled
            out["torch_compile_s"] = compile_s
        else:
            out["warnings"].append(err)
        # torch.compile is ours; no candidate code ran since the last check (the dispatcher registration lists kept)
        side.resnapshot()

    candidate_calls = [0]

    def verify(what: str, inputs, pristine, outputs: dict, launched: dict) -> None:
        """Outside the timed region, after every warm-up and timed call: the candidate's timed behaviour must be
        the checked behaviour (warm-up detection, result caching, lazy outputs, left-behind state)."""
        if "candidate" not in outputs:
            return
        candidate_calls[0] += 1
        side.check_between_calls()
        if launched.get("candidate", 0) == 0:
            raise TimingFailure("rejected", f"ModelNew ran no kernel it compiled in {what} (it skipped its kernels "
                                            f"once timing started: cached or precomputed results?) [rule must-launch]")
        # the judge's inputs (eager's too), and the candidate's own copy where it runs in a process of its own
        if fingerprint(inputs) != pristine or getattr(side, "inputs_changed", False):
            raise TimingFailure("incorrect", f"ModelNew modified its inputs in {what} [rule no-input-mutation]")
        if "eager" in outputs:
            c = compare_outputs(outputs["candidate"], outputs["eager"], policy)
            if not c.passed:
                # Not presumed a trick: a program wrong on rare inputs (or at a rounding edge) fails here too.
                raise TimingFailure("incorrect", f"the output of {what} is wrong: {c.detail} (every timed call is "
                                                 f"checked against eager PyTorch on its own fresh inputs; this fails "
                                                 f"a program whose behaviour changes once timing starts, such as "
                                                 f"warm-up detection, caching or lazy outputs, and one that is "
                                                 f"wrong only on some inputs)")

    kernel_before = launches.kernel_ns()
    # the timing phase: its budget, plus one forward call's limit for each model's slowest call
    phase_s = 3 * opts.budget_s + len(models) * context.call_limit_s
    progress.stage("timing", models=len(models))
    cpu = getattr(side, "cpu", None)  # the caller's reading of the candidate's process's CPU time
    if cpu is not None:
        cpu.start()
    try:
        with watchdog.limit(phase_s, "the timing phase"):
            summaries = time_models(models, make_inputs, platform, timer, opts, rng, verify=verify)
    finally:
        if cpu is not None:
            cpu.stop()
    found = side.findings()  # the full check (every patched function), once timing is over
    if found:
        raise guards.GuardViolation(found)
    if hasattr(side, "timing_check"):
        check, warning = side.timing_check(strict=platform.device_type != "cpu")
        out["checks"].append(check)
        out["warnings"] += [warning] if warning else []
        deferred = side.cpu_check()
        if deferred is not None:
            out["checks"].append(deferred[0])
            if deferred[1]:
                raise TimingFailure("rejected", deferred[1])
    _state_conditions(out, side, remote is not None, compiled_conditions)
    if platform.synchronous_kernels and candidate_calls[0]:
        # kernel time per candidate call (warm-ups and timed calls) against the median timed call
        per_call_ns = (launches.kernel_ns() - kernel_before) / candidate_calls[0]
        out["custom_share_timed"] = work.share(per_call_ns, summaries["candidate"]["median_ms"] * 1e6)
    out.update({name: summaries.get(name) for name in ("candidate", "eager", "compiled")})
    if remote is not None and remote.failed:
        out["warnings"].append(f"torch.compile baseline lost during timing: {remote.failed}")
    eager_ms = summaries["eager"]["median_ms"]
    if eager_ms < platform.tiny_problem_ms:
        out["warnings"].append(f"the reference runs in {eager_ms * 1000:.1f} µs: launch and call overhead dominate, "
                               f"speedups here say little about kernel quality")
    from ..roofline import roofline

    with guards.trusted():  # FLOP counting imports torch._dynamo lazily, which sets os.environ (audited)
        out["roofline"] = roofline(ref_model, make_inputs(0), summaries["candidate"]["median_ms"], platform)
    # lazy imports of ours (flop counter, dynamo) may rebind torch names
    side.resnapshot()
    if out["roofline"].get("suspicious"):
        out["warnings"].append(out["roofline"]["suspicious"])
    below = below_floor(summaries["candidate"], out["roofline"], platform)
    if below:
        raise TimingFailure("rejected", below)
    return out


def _state_conditions(out: dict, side, compiled_remote: bool, compiled_conditions) -> None:
    """The timing conditions of every process that timed a side, as a check (and a warning where they differ). A
    torch.compile baseline compiled in this process runs under this process's conditions."""
    label = None if isinstance(side, InProcess) else "candidate's process (reported)"
    check, warning = conditions.check_timed(label, getattr(side, "conditions", None), compiled_remote,
                                            compiled_conditions)
    out["checks"].append(check)
    out["warnings"] += [warning] if warning else []


# A timed call below this share of the floor fails on accelerators (their ceilings are measured on an idle device;
# the margin covers the measurement's own noise). On the CPU target, a machine shared with other work measures its
# ceilings low, so there it stays a warning.
FLOOR_FAIL_SHARE = 0.8


def below_floor(candidate: dict, roof: dict, platform) -> str:
    """A reason when the fastest timed call beat the hardware floor (moving the problem's bytes at the measured
    bandwidth, or its FLOPs at the measured rate): a measurement that missed work, not a fast kernel."""
    floor, fastest = roof.get("floor_ms"), candidate.get("min_ms")
    if platform.device_type == "cpu" or not floor or fastest is None or fastest >= FLOOR_FAIL_SHARE * floor:
        return ""
    return (f"a timed call took {fastest:.4g} ms, below the hardware floor of {floor:.4g} ms ({roof.get('bound')}"
            f"-bound at measured ceilings): work escaped the timer [rule no-patching]")
