"""Evaluate a candidate against a problem on a target: the caller's side.

Every evaluation runs in a fresh child process (`kforge_core.eval.sandbox`), so a crash, hang, `sys.exit`, segfault or
out-of-memory in candidate code becomes a verdict and never takes the caller down. See `kforge_core.eval.harness` for
what runs in the child and `kforge_core.eval.rules` for the rules it enforces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ..errors import ProblemError, SandboxError, UsageError
from ..platform import get_platform
from ..problem import Problem, ProblemReport
from . import baselines, ceilings, judged
from .harness import watchdog
from .memory_use import default_memory_limit_mb
from .sandbox import ChildOutcome, prestart, run_child
from .tolerance import get_policy
from .verdict import Timing, Verdict, mark_noise


@dataclass
class EvalOptions:
    seeds: int = 5  # correctness trials with fresh random inputs (at least 5 by policy)
    tolerance: str = "default"  # see kforge_core.eval.tolerance.POLICIES
    timing: bool = True
    baselines: bool = True  # time eager and torch.compile in the same child run
    profile: bool = False
    size_class: str | None = None  # "cpu" applies a gallery problem's CPU_SIZES; None keeps the file's own sizes
    timeout_s: float = 300.0  # wall clock for the whole child (build, checks, timing)
    memory_limit_mb: int | None = field(default_factory=default_memory_limit_mb)  # MiB; None: no limit
    timing_options: dict = field(default_factory=dict)  # TimingOptions fields (min_trials, budget_s, ...)

    def __post_init__(self) -> None:
        if self.seeds < 5:
            raise UsageError("at least 5 seeds are required for a correctness verdict")
        get_policy(self.tolerance)


# what the fork server's child and the isolation write to the harness log when setting up a child fails
SETUP_FAILURES = ("evaluation child set-up failed:", "kforge isolation:")


def _outcome_to_verdict(outcome: ChildOutcome, target: str, timeout_s: float) -> Verdict:
    log_tail = "\n".join(outcome.log.strip().splitlines()[-40:])
    r = outcome.result
    if r is not None and "problem_error" in r:
        raise ProblemError(r["problem_error"])
    if outcome.timed_out:
        return Verdict("timeout", f"no verdict within {timeout_s:g} s (infinite loop, deadlock, or a build or run "
                                  f"that is far too slow); the process group was killed", target, log_tail=log_tail,
                       wall_s=outcome.wall_s)
    if outcome.memory_exceeded:
        return Verdict("runtime_error", "the candidate exceeded the evaluation's memory limit and was killed",
                       target, log_tail=log_tail, wall_s=outcome.wall_s)
    phase = watchdog.timeout_reason(outcome.log) if r is None and outcome.returncode == 1 else None
    if phase:
        return Verdict("timeout", phase, target, log_tail=log_tail, wall_s=outcome.wall_s)
    setup = [ln for ln in outcome.log.splitlines() if ln.startswith(SETUP_FAILURES)]
    if r is None and setup:  # our sandbox failed before the candidate ran: not the candidate's doing
        return Verdict("runtime_error", f"the evaluation sandbox failed before the candidate ran: {setup[-1]}",
                       target, log_tail=log_tail, wall_s=outcome.wall_s)
    if r is None:
        sig = outcome.signal_name
        if sig:
            why = {"SIGSEGV": "a segmentation fault: out-of-bounds access in a kernel?",
                   "SIGKILL": "killed: out of memory?", "SIGABRT": "an abort",
                   "SIGBUS": "a bus error: misaligned or unmapped memory", "SIGFPE": "an arithmetic fault"}
            reason = f"the candidate's process died of {sig}" + (f" ({why[sig]})" if sig in why else "")
        else:
            reason = f"the candidate's process exited with code {outcome.returncode} before giving a verdict " \
                     f"(sys.exit / os._exit / abort in candidate code?)"
        if "MemoryError" in outcome.log or "Cannot allocate memory" in outcome.log:
            reason += "; it ran out of memory"
        return Verdict("runtime_error", reason, target, log_tail=log_tail, wall_s=outcome.wall_s)
    fields = {k: v for k, v in r.items() if k in Verdict.__dataclass_fields__}
    fields.setdefault("target", target)
    fields["log_tail"] = log_tail
    fields["wall_s"] = outcome.wall_s
    if "harness_error" in r:
        fields["log_tail"] = (log_tail + "\n" + r["harness_error"]).strip()
    return Verdict.from_dict(fields)


class EvaluationCancelled(Exception):
    """The caller's cancel fired while an evaluation ran: its process group was killed, there is no verdict."""


def _shared_baseline(problem: Problem, platform, options: EvalOptions, on_stage, cancel):
    """The run's warm torch.compile baseline server, started if needed; None when it cannot serve (then the child
    compiles its own, as before, and reports why)."""
    if not (options.baselines and options.timing and baselines.enabled()):
        return None
    key = baselines.key_for(problem.source, options.size_class, platform.name, platform.device_name())

    def make():
        return baselines.BaselineServer(key, problem.source, platform.name, options.size_class,
                                        memory_limit_mb=options.memory_limit_mb,
                                        limit_address_space=platform.limit_address_space,
                                        timeout_s=options.timeout_s, on_stage=on_stage, cancel=cancel)

    if on_stage is not None and baselines.building(key):
        on_stage({"stage": "waiting for the torch.compile baseline (being built since the run started)"})
    try:
        return baselines.get(key, make)
    except baselines.EvaluationCancelledDuringStart:
        raise EvaluationCancelled() from None
    except SandboxError:
        return None  # the child builds its own baseline (and reports a problem error itself)


def prepare(problem: Problem, target: str, options: EvalOptions, cancel: Callable[[], bool] | None = None) -> None:
    """Start what this problem's evaluations will need before the first one asks: the fork server and its first
    pre-started children, and the run's torch.compile baseline (built once per run; seconds to minutes). A run
    calls it in a thread of its own as it begins, so these overlap the agent's first generation instead of
    following it. Never raises: whatever did not start here is started (or reported) by the evaluation itself.
    `cancel()` turning True stops a baseline build still under way (the run ended first)."""
    platform = get_platform(target, require_available=True)
    # an early start only: the evaluation that needs either one starts it again or says why it could not
    for start in (lambda: prestart(platform.name, options.memory_limit_mb, platform.limit_address_space),
                  lambda: _shared_baseline(problem, platform, options, None, cancel)):
        if cancel is not None and cancel():
            return
        try:
            start()
        except Exception:  # noqa: BLE001 - see above
            pass


def evaluate(problem: Problem, candidate_source: str, target: str, options: EvalOptions | None = None, *,
             on_stage: Callable[[dict], None] | None = None, cancel: Callable[[], bool] | None = None) -> Verdict:
    """Judge `candidate_source` (a ModelNew program) against `problem` on `target`. Always returns a Verdict for
    anything the candidate does; raises ProblemError for an unusable problem, UsageError for a bad target, and
    EvaluationCancelled when `cancel()` turned True before the verdict (the child's process group is killed at
    once). `on_stage(dict)` receives the stages as the evaluation reaches them ({"stage": "checking seed 2/5"})."""
    options = options or EvalOptions()
    platform = get_platform(target, require_available=True)
    request = {"mode": "evaluate", "target": platform.name, **{k: v for k, v in asdict(options).items()
                                                                  if k not in ("timeout_s", "memory_limit_mb")}}
    server = _shared_baseline(problem, platform, options, on_stage, cancel)
    relay = None
    if server is not None and server.problem_error is not None:
        raise ProblemError(server.problem_error)
    if server is not None and server.usable:
        relay = baselines.BaselineRelay(server)
        request.update(remote_compiled=True, compiled_conditions=server.conditions)
    elif server is not None and server.error:
        request["compiled_unavailable"] = server.error  # compiling again in every child would fail again
    files = {"problem.py": problem.source, "candidate.py": candidate_source}
    limits = dict(timeout_s=options.timeout_s, memory_limit_mb=options.memory_limit_mb,
                  limit_address_space=platform.limit_address_space, fork_server_safe=platform.fork_server_safe,
                  on_stage=on_stage, relay=relay, cancel=cancel)
    if judged.enabled():  # the judge in one process, the candidate in another (docs/EVALUATOR.md)
        outcome = judged.run_judged(run_child, request, files, **limits)
    else:
        outcome = run_child(request, files, **limits)
    if outcome.cancelled:
        raise EvaluationCancelled()
    if outcome.result is not None:
        ceilings.store_reported(outcome.result.pop("measured_ceilings", None))
    verdict = _outcome_to_verdict(outcome, platform.name, options.timeout_s)
    if not judged.enabled() and outcome.result is not None:
        verdict.warnings.append("judged in the candidate's own process (KFORGE_JUDGE=0 or no memfd on this OS): "
                                "code that gets past the static rules and guards could forge this verdict")
    if relay is not None:
        _merge_shared_baseline(verdict, relay, server)
    mark_noise(verdict)
    return verdict


def _merge_shared_baseline(verdict: Verdict, relay: baselines.BaselineRelay, server) -> None:
    """The compiled baseline's times come from the caller's relay, not from the child's result."""
    summary = relay.summary()
    verdict.compiled = Timing(**summary) if summary and verdict.candidate is not None else None
    verdict.torch_compile_s = server.torch_compile_s
    verdict.baseline = {"compiled": "shared", "built_at": server.started_at, "key": server.key}
    if verdict.candidate is not None and summary is None:
        verdict.warnings.append("torch.compile baseline unavailable: its server did not time this evaluation")


def head_to_head(problem: Problem, programs: dict[int, str], target: str, options: EvalOptions | None = None, *,
                 on_stage: Callable[[dict], None] | None = None,
                 cancel: Callable[[], bool] | None = None) -> dict:
    """Re-time `programs` ({iteration: source}) head to head in one evaluation, interleaved with each other and the
    baselines on the same inputs: judged (each contender in its own candidate's process) unless KFORGE_JUDGE=0.
    Returns {"contenders": {iteration: Timing dict}, "eager", "compiled", "checks", "warnings", "per_contender":
    {iteration: {"checks", "warnings"}}, "judged"} or {"error": why, "warnings"}; raises EvaluationCancelled on a
    cancel."""
    options = options or EvalOptions()
    platform = get_platform(target, require_available=True)
    names = {f"c{i}": i for i in programs}
    request = {"mode": "head_to_head", "target": platform.name, "contenders": list(names),
               "size_class": options.size_class, "tolerance": options.tolerance,
               "timing_options": dict(options.timing_options)}
    server = _shared_baseline(problem, platform, options, on_stage, cancel)
    relay = None
    if server is not None and server.usable:
        relay = baselines.BaselineRelay(server)
        request.update(remote_compiled=True, compiled_conditions=server.conditions)
    files = {"problem.py": problem.source, **{f"{name}.py": programs[i] for name, i in names.items()}}
    limits = dict(timeout_s=options.timeout_s, memory_limit_mb=options.memory_limit_mb,
                  limit_address_space=platform.limit_address_space, fork_server_safe=platform.fork_server_safe,
                  on_stage=on_stage, relay=relay, cancel=cancel)
    if judged.enabled():  # the judge alone, one candidate's process per contender (docs/EVALUATOR.md)
        outcome = judged.run_judged(run_child, request, files,
                                    contenders={name: programs[i] for name, i in names.items()}, **limits)
    else:
        outcome = run_child(request, files, **limits)
    if outcome.cancelled:
        raise EvaluationCancelled()
    r = outcome.result or {}
    if "contest" not in r:
        return {"error": r.get("reason") or f"the head-to-head child gave no result (exit {outcome.returncode})",
                "warnings": list(r.get("warnings") or [])}
    contest, per = r["contest"], r.get("per_contender") or {}
    warnings = list(r.get("warnings") or [])
    if not r.get("judged"):
        warnings.append("timed in one process with every contender (KFORGE_JUDGE=0 or no memfd on this OS): code "
                        "that gets past the static rules and guards could forge these times")
    return {"contenders": {i: contest[name] for name, i in names.items() if name in contest},
            "eager": contest.get("eager"), "compiled": relay.summary() if relay is not None else None,
            "checks": r.get("checks") or [], "warnings": warnings, "judged": bool(r.get("judged")),
            "per_contender": {i: {"checks": list((per.get(name) or {}).get("checks") or []),
                                  "warnings": list((per.get(name) or {}).get("warnings") or [])}
                              for name, i in names.items()}}


def validate_problem(problem: Problem, target: str = "cpu", timeout_s: float = 120.0,
                     size_class: str | None = None) -> ProblemReport:
    """Run the reference in a child process. Raises ProblemError for unusable problems."""
    platform = get_platform(target, require_available=True)
    outcome = run_child({"mode": "validate", "target": platform.name, "size_class": size_class},
                        {"problem.py": problem.source}, timeout_s=timeout_s, memory_limit_mb=16384,
                        limit_address_space=platform.limit_address_space,
                        fork_server_safe=platform.fork_server_safe)
    r = outcome.result
    if outcome.timed_out:
        raise ProblemError(f"the reference did not finish within {timeout_s:g} s")
    if r is None:
        raise ProblemError(f"running the reference crashed the process (exit {outcome.returncode}): "
                           f"{outcome.log.strip()[-500:]}")
    if "problem_error" in r:
        raise ProblemError(r["problem_error"])
    if "problem" not in r:
        raise ProblemError(r.get("reason", "the reference could not be run"))
    p = r["problem"]
    return ProblemReport(inputs=p["inputs"], outputs=p["outputs"], reference_ms=p.get("reference_ms"),
                         warnings=p["warnings"])
