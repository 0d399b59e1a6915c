"""Evaluate a candidate against a problem on a target: the caller's side.

Every evaluation runs in a fresh child process (`kforge_core.eval.sandbox`), so a crash, hang, `sys.exit`, segfault or
out-of-memory in candidate code becomes a verdict and never takes the caller down. See `kforge_core.eval.harness` for
what runs in the child and `kforge_core.eval.rules` for the rules it enforces.
"""

from __future__ import annotations

import time
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
    # with `profile`, the vendor's kernel profiler too (Nsight Compute on CUDA: a replay of each kernel, about 10 s
    # an evaluation), beside torch.profiler; off for an analysis that does not read its metrics (the built-in's)
    device_profiler: bool = True
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


class _SharedBaseline:
    """This evaluation's hold on the run's torch.compile baseline server (`baselines.Build`). Where the server is
    ready as the evaluation begins, the child is told at once how it gets its compiled baseline; else the child
    starts at once and asks as its timing phase begins, and only then does the caller wait for the build (`open`,
    from the relay: the waiting stage, cancel polled, the wait added to the evaluation's time limit). A candidate
    that fails before timing never waits, and the build goes on for the next evaluation."""

    def __init__(self, problem: Problem, platform, options: EvalOptions, cancel, origin: str):
        self.key = baselines.key_for(problem.source, options.size_class, platform.name, platform.device_name())
        self.cancel = cancel
        self.problem_error: str | None = None  # the server found the problem unusable: raised as ProblemError
        self._waited = 0.0
        self._waiting_since: float | None = None

        def make(stop):
            return baselines.BaselineServer(self.key, problem.source, platform.name, options.size_class,
                                            memory_limit_mb=options.memory_limit_mb,
                                            limit_address_space=platform.limit_address_space,
                                            timeout_s=options.timeout_s, cancel=stop)

        self.make = make
        self.build = baselines.start(self.key, make, cancel, origin, owner=self)

    def server(self, on_stage=None):
        """The server, waited for (None where it could not start: the child compiles its own, as before). Raises
        EvaluationCancelled when this evaluation's cancel turns True first (the build goes on for the others)."""
        build = self.build
        if not build.done and on_stage is not None:
            since = "this evaluation started" if build.owner is self else build.origin
            on_stage({"stage": f"waiting for the torch.compile baseline (being built since {since})"})
        self._waiting_since = time.monotonic()
        try:
            while True:
                try:
                    return build.wait(self.cancel)
                except baselines.EvaluationCancelledDuringStart:
                    raise EvaluationCancelled() from None
                except baselines.BuildStopped:
                    if self.cancel is not None and self.cancel():
                        raise EvaluationCancelled() from None
                    if build.stopped:  # released (the run ended): no server for this evaluation
                        return None
                    # stopped by the evaluation that started it (its cancel): this one still needs it
                    build = self._start_again()
                except SandboxError:
                    return None  # the child builds its own baseline (and reports a problem error itself)
        finally:
            self._waited += time.monotonic() - self._waiting_since
            self._waiting_since = None

    def ready(self) -> bool:
        """Whether the build has an outcome to use now (a server, or none to be had); a build its starter stopped
        (its cancel) is started again for this evaluation instead, never waited for here."""
        b = self.build
        if b.done and isinstance(b.failure, (baselines.EvaluationCancelledDuringStart, baselines.BuildStopped)) \
                and not b.stopped and not (self.cancel is not None and self.cancel()):
            self._start_again()
        return self.build.done

    def _start_again(self) -> baselines.Build:
        """This evaluation's own build, where the one it held was stopped by the evaluation that started it."""
        self.build = baselines.start(self.key, self.make, self.cancel, EVALUATION_STARTED, owner=self)
        return self.build

    def waited_s(self) -> float:
        """Seconds this evaluation spent waiting for the server (live while it waits): added to its time limit."""
        since = self._waiting_since
        return self._waited + (time.monotonic() - since if since is not None else 0.0)

    def answer(self, server) -> dict:
        """What the child is told about its compiled baseline (never a time): today's three cases."""
        if server is not None and server.problem_error is not None:
            self.problem_error = server.problem_error
            return {"compiled": "unavailable", "reason": "the problem failed in the torch.compile baseline server"}
        if server is not None and server.error:
            return {"compiled": "unavailable", "reason": server.error}  # compiling again would fail again
        if server is not None and server.usable:
            return {"compiled": "shared", "conditions": server.conditions}
        return {"compiled": "local"}  # no server: the child compiles its own, as before

    def open(self, on_stage) -> tuple[dict, object]:
        """The relay's "open" (the child's timing phase begins): wait for the server, say how the child gets its
        compiled baseline, and the server where it serves."""
        try:
            server = self.server(on_stage)
        except EvaluationCancelled:  # the supervision kills the child at its next poll
            return {"compiled": "unavailable", "reason": "the evaluation was cancelled"}, None
        answer = self.answer(server)
        return answer, server if answer["compiled"] == "shared" else None

    def found_problem_error(self) -> str | None:
        """The server's problem error, once its build has finished (never waited for)."""
        if self.problem_error is None and self.build.done and self.build.server is not None:
            self.problem_error = self.build.server.problem_error
        return self.problem_error


EVALUATION_STARTED = "an earlier evaluation started"  # as another evaluation sees a build that one started
RUN_STARTED = "the run started"


def _shared_baseline(problem: Problem, platform, options: EvalOptions, cancel,
                     origin: str = EVALUATION_STARTED) -> _SharedBaseline | None:
    """The run's torch.compile baseline server for this evaluation, on its way (started if needed, never waited for
    here); None where the evaluation has no shared baseline (the child compiles its own, as before, if it times
    baselines)."""
    if not (options.baselines and options.timing and baselines.enabled()):
        return None
    return _SharedBaseline(problem, platform, options, cancel, origin)


def _with_baseline(request: dict, limits: dict, shared: _SharedBaseline | None, on_stage, cancel,
                   raise_problem_error: bool) -> baselines.BaselineRelay | None:
    """Say in `request` how the child gets its compiled baseline and give `limits` the relay: decided now where the
    server is ready (or known not to work), else asked by the child as its timing phase begins (`compiled_baseline`
    "ask"), the caller waiting for the build then."""
    if shared is None:
        return None
    if shared.ready():
        server = shared.server()
        answer = shared.answer(server)
        if shared.problem_error is not None and raise_problem_error:
            raise ProblemError(shared.problem_error)
        request["compiled_baseline"] = answer
        relay = baselines.BaselineRelay(server) if answer["compiled"] == "shared" else None
    else:
        request["compiled_baseline"] = "ask"
        relay = baselines.BaselineRelay(open_server=lambda: shared.open(on_stage))
        limits["grace"] = shared.waited_s  # the wait is the build's time, not the evaluation's
        if raise_problem_error:  # a problem error found by the server stops the child (raised as ProblemError)
            limits["cancel"] = lambda: (cancel is not None and cancel()) or shared.problem_error is not None
    limits["relay"] = relay
    return relay


def prepare(problem: Problem, target: str, options: EvalOptions, cancel: Callable[[], bool] | None = None) -> None:
    """Start what this problem's evaluations will need before the first one asks: the fork server and its first
    pre-started children, and the run's torch.compile baseline (built once per run; seconds to minutes). A run
    calls it in a thread of its own as it begins, so these overlap the agent's first generation instead of
    following it. Never raises: whatever did not start here is started (or reported) by the evaluation itself.
    `cancel()` turning True stops a baseline build still under way (the run ended first)."""
    platform = get_platform(target, require_available=True)

    def baseline() -> None:  # started here, waited for until built (or stopped), so the thread ends with it
        shared = _shared_baseline(problem, platform, options, cancel, RUN_STARTED)
        if shared is not None:
            shared.server()

    # an early start only: the evaluation that needs either one starts it again or says why it could not
    for start in (lambda: prestart(platform.name, options.memory_limit_mb, platform.limit_address_space), baseline):
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
    files = {"problem.py": problem.source, "candidate.py": candidate_source}
    limits = dict(timeout_s=options.timeout_s, memory_limit_mb=options.memory_limit_mb,
                  limit_address_space=platform.limit_address_space, fork_server_safe=platform.fork_server_safe,
                  on_stage=on_stage, cancel=cancel)
    shared = _shared_baseline(problem, platform, options, cancel)
    relay = _with_baseline(request, limits, shared, on_stage, cancel, raise_problem_error=True)
    if judged.enabled():  # the judge in one process, the candidate in another (docs/EVALUATOR.md)
        outcome = judged.run_judged(run_child, request, files, **limits)
    else:
        outcome = run_child(request, files, **limits)
    if shared is not None and shared.problem_error is not None:  # found as the child asked: it was stopped
        raise ProblemError(shared.problem_error)
    if outcome.cancelled:
        raise EvaluationCancelled()
    if shared is not None and shared.found_problem_error():  # the build finished meanwhile: as if found before
        raise ProblemError(shared.problem_error)
    if outcome.result is not None:
        ceilings.store_reported(outcome.result.pop("measured_ceilings", None))
    verdict = _outcome_to_verdict(outcome, platform.name, options.timeout_s)
    if not judged.enabled() and outcome.result is not None:
        verdict.warnings.append("judged in the candidate's own process (KFORGE_JUDGE=0 or no memfd on this OS): "
                                "code that gets past the static rules and guards could forge this verdict")
    if relay is not None and relay.server is not None:
        _merge_shared_baseline(verdict, relay, relay.server)
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
    files = {"problem.py": problem.source, **{f"{name}.py": programs[i] for name, i in names.items()}}
    limits = dict(timeout_s=options.timeout_s, memory_limit_mb=options.memory_limit_mb,
                  limit_address_space=platform.limit_address_space, fork_server_safe=platform.fork_server_safe,
                  on_stage=on_stage, cancel=cancel)
    shared = _shared_baseline(problem, platform, options, cancel)
    # as before, a contest times the compiled baseline only where the server serves (it never compiles its own)
    relay = _with_baseline(request, limits, shared, on_stage, cancel, raise_problem_error=False)
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
