"""The synthesis loop: a functional pass, then an optimization pass, as one generator of typed events.

    functional step   generate k candidates (in parallel) -> evaluate each (one at a time) -> feedback
                      -> RETRY until a candidate is correct, then OPTIMIZE (or STOP: budget, no optimization pass)
    optimization step analyse the best (profile, roofline, timings, screenshots, what was tried)
                      -> regenerate from the best with the recommendations -> evaluate -> keep the fastest correct
                      -> OPTIMIZE, or STOP (iterations, patience)

Each step returns a `Next` value and `Synthesis.events` only dispatches on it. Budgets (wall time, tokens) and the
cancel flag are checked between steps; the cancel flag also at every streamed token. The event stream always ends
with exactly one `RunFinished`, whatever happens inside (a cancel, a fatal endpoint error, a bug: a bug is reported
as an event first, then re-raised).

The model's mistakes are data: a compile error, a wrong kernel, a reply without a program end an iteration with
that status and are fed back to the next generation. An endpoint failure (timeout, 5xx, broken stream after the
client's retries) also ends the iteration (`no_program`, with the reason) and the loop goes on, until
`MAX_ENDPOINT_FAILURES` calls in a row have failed; a refusal that would repeat identically (bad key, unknown
model) stops the run at once.

Evaluations run one at a time: the machine may have two cores, and timing runs must never overlap (a candidate
timed while another compiles would be measured on a loaded machine). Only the model calls of a best-of-k step run
in parallel.
"""

from __future__ import annotations

import difflib
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from .agents.base import (AnalysisAgent, AnalysisRequest, Feedback, GenerationAgent, GenerationRequest,
                          GenerationResult, Recommendation)
from .errors import KForgeError
from .evaluator import EvalOptions, evaluate
from .llm import LLMAuthError, LLMConfigError, LLMError, LLMRequestError, LLMStreamError
from .loop_config import RunConfig
from .loop_events import (BestUpdated, CompileLog, Diff, ErrorReported, IterationFinished, IterationStarted,
                          LoopEvent, PassStarted, ProfileReady, ProgramExtracted, ProgramMissing, PromptSent,
                          RecommendationsReady, RunFinished, Timings, Tokens, UsageRecorded, VerdictReady)
from .platform import get_platform
from .problem import load_problem
from .store import ITERATION_STATUSES
from .verdict import Verdict

FUNCTIONAL, OPTIMIZATION = "functional", "optimization"
MAX_ENDPOINT_FAILURES = 3  # model calls failing in a row (after the client's own retries) before the run stops
REPLY_EXCERPT_CHARS = 2000
# The store has no "cancelled" iteration status yet; until it does, an iteration cut short without a verdict is
# recorded as "no_program" with a reason that says it was cancelled.
CANCELLED_ITERATION_STATUS = "cancelled" if "cancelled" in ITERATION_STATUSES else "no_program"
# Endpoint refusals that a retry cannot fix: the run stops instead of burning iterations on them.
FATAL_LLM_ERRORS = (LLMAuthError, LLMConfigError, LLMRequestError)
# How promising a failed attempt is, to pick which of a best-of-k step the next step builds on.
_STATUS_RANK = {"correct": 0, "incorrect": 1, "runtime_error": 2, "timeout": 3, "compile_error": 4, "rejected": 5,
                "no_program": 6}


# Reasons that say an iteration was never a judgement of the model's work (so it is not fed back as its mistake).
ENDPOINT_FAILED = "the model endpoint failed"
STOPPED = "stopped before a verdict"


class Next(StrEnum):
    RETRY = "retry"  # another functional step
    OPTIMIZE = "optimize"  # an optimization step
    STOP = "stop"


class Cancelled(Exception):
    """The run was asked to stop (cancel flag, Ctrl-C); raised at the next check point."""


class FatalEndpointError(KForgeError):
    """The model endpoint refused in a way retrying cannot fix, or failed too often in a row."""


@dataclass
class Attempt:
    """One candidate's outcome, as the loop remembers it (also rebuilt from the store on resume)."""

    iteration: int
    pass_name: str
    status: str
    reason: str
    code: str | None = None
    verdict: Verdict | None = None
    recommendations: list[Recommendation] = field(default_factory=list)
    endpoint_failure: bool = False  # no program because the endpoint failed (or the run stopped), not the model

    @property
    def candidate_ms(self) -> float | None:
        return self.verdict.candidate_ms if self.verdict else None

    @property
    def correct(self) -> bool:
        return self.status == "correct"


@dataclass
class LoopState:
    """Where a run stands between steps. Fresh for a new run; `loop_state.restore_state` rebuilds it on resume."""

    next_iteration: int = 0
    functional_steps: int = 0
    optimization_steps: int = 0
    steps_without_improvement: int = 0
    best: Attempt | None = None
    last: Attempt | None = None  # the attempt the next functional generation builds on
    last_optimization: Attempt | None = None  # the latest optimization attempt (its failure is fed back)
    history: list[dict] = field(default_factory=list)  # for the analysis agent: what was tried, what it gave
    tokens_used: int = 0
    elapsed_before_s: float = 0.0  # wall time spent before a resume
    passes_started: set[str] = field(default_factory=set)
    endpoint_failures_in_a_row: int = 0


class Synthesis:
    """One run of the loop. `events()` yields everything that happens; nothing here touches the run store."""

    def __init__(self, config: RunConfig, generation_agent: GenerationAgent, analysis_agent: AnalysisAgent, *,
                 state: LoopState | None = None, should_cancel: Callable[[], bool] | None = None,
                 evaluate_fn: Callable[..., Verdict] = evaluate, clock: Callable[[], float] = time.monotonic):
        config.validate()
        self.config = config
        self.generator = generation_agent
        self.analyzer = analysis_agent
        self.state = state or LoopState()
        self._should_cancel = should_cancel or (lambda: False)
        self._evaluate = evaluate_fn
        self._clock = clock
        self._started = clock()
        self._cancel = threading.Event()  # set on Ctrl-C / cancel so agent threads stop at their next token
        self.problem = load_problem(text=config.problem_source, name=config.problem_name)
        self.platform = get_platform(config.target, require_available=True)
        self._example_problem, self._example_candidate = self.platform.example().read()
        self._open: dict[int, str] = {}  # iterations started and not finished -> pass
        self.stop_reason = ""
        self.finished = False

    # ------------------------------------------------------------------------------------------ dispatch
    def events(self) -> Iterator[LoopEvent]:
        """The run as events; always ends with one RunFinished (a bug is re-raised after it)."""
        try:
            nxt = Next.OPTIMIZE if self.state.best is not None else Next.RETRY
            while nxt is not Next.STOP:
                self._check_cancel()
                budget = self._budget_spent()
                if budget:
                    self.stop_reason = budget
                    break
                step = self._functional_step if nxt is Next.RETRY else self._optimization_step
                nxt = yield from step()
            yield from self._close(*self._outcome())
        except (Cancelled, KeyboardInterrupt):
            self._cancel.set()
            self.stop_reason = "cancelled"
            yield from self._close("cancelled", None)
        except KForgeError as e:  # a typed error a user can act on (endpoint refusal, unusable problem)
            self._cancel.set()
            yield ErrorReported(message=str(e), where="loop")
            yield from self._close("failed", str(e))
        except Exception as e:
            self._cancel.set()
            message = f"internal error: {type(e).__name__}: {e}"
            yield ErrorReported(message=message, where="loop")
            yield from self._close("failed", message)
            raise

    def _outcome(self) -> tuple[str, str | None]:
        if self.state.best is not None:
            return "succeeded", None
        return "failed", self.stop_reason or "no correct program was found"

    def _close(self, status: str, error: str | None) -> Iterator[LoopEvent]:
        if self.finished:
            return
        for index, pass_name in sorted(self._open.items()):
            yield self._finished(Attempt(index, pass_name, CANCELLED_ITERATION_STATUS,
                                         f"{STOPPED} ({self.stop_reason or status})", endpoint_failure=True))
        self.finished = True
        best = self.state.best
        yield RunFinished(status=status, error=error, stop_reason=self.stop_reason,
                          best_iteration=best.iteration if best else None)

    def _check_cancel(self) -> None:
        if self._cancel.is_set() or self._should_cancel():
            self._cancel.set()
            raise Cancelled()

    def _budget_spent(self) -> str:
        cfg, st = self.config, self.state
        elapsed = st.elapsed_before_s + self._clock() - self._started
        if cfg.max_wall_s is not None and elapsed >= cfg.max_wall_s:
            return f"wall-clock budget spent ({elapsed:.0f} s of {cfg.max_wall_s:g} s)"
        if cfg.max_total_tokens is not None and st.tokens_used >= cfg.max_total_tokens:
            return f"token budget spent ({st.tokens_used} of {cfg.max_total_tokens} tokens)"
        return ""

    # ------------------------------------------------------------------------------------------ steps
    def _functional_step(self) -> Iterator[LoopEvent]:
        cfg, st = self.config, self.state
        if FUNCTIONAL not in st.passes_started:
            st.passes_started.add(FUNCTIONAL)
            yield PassStarted(pass_name=FUNCTIONAL, max_iterations=cfg.max_functional_iters)
        if st.functional_steps >= cfg.max_functional_iters:
            self.stop_reason = f"no correct program in {cfg.max_functional_iters} functional step(s)"
            return Next.STOP
        st.functional_steps += 1
        indexes = yield from self._start_iterations(FUNCTIONAL)
        base = st.last if st.last is not None and st.last.code is not None else None
        feedback = _feedback(st.last) if st.last is not None else None
        attempts = yield from self._generate_and_evaluate(FUNCTIONAL, indexes, base, feedback, [])
        judged = [a for a in attempts if not a.endpoint_failure]
        if judged:
            st.last = min(judged, key=lambda a: (_STATUS_RANK.get(a.status, 9), a.iteration))
        if st.best is not None:
            if cfg.max_optimization_iters == 0:
                self.stop_reason = "a correct program was found; no optimization pass was asked for"
                return Next.STOP
            return Next.OPTIMIZE
        if st.functional_steps >= cfg.max_functional_iters:
            self.stop_reason = f"no correct program in {cfg.max_functional_iters} functional step(s)"
            return Next.STOP
        return Next.RETRY

    def _optimization_step(self) -> Iterator[LoopEvent]:
        cfg, st = self.config, self.state
        if OPTIMIZATION not in st.passes_started:
            st.passes_started.add(OPTIMIZATION)
            yield PassStarted(pass_name=OPTIMIZATION, max_iterations=cfg.max_optimization_iters)
        if st.optimization_steps >= cfg.max_optimization_iters:
            self.stop_reason = f"optimization budget spent ({cfg.max_optimization_iters} step(s))"
            return Next.STOP
        st.optimization_steps += 1
        best_before = st.best
        assert best_before is not None and best_before.code is not None
        indexes = yield from self._start_iterations(OPTIMIZATION)
        recommendations = yield from self._analyse(indexes[0], best_before)
        feedback = _optimization_feedback(best_before, st.last_optimization, recommendations)
        attempts = yield from self._generate_and_evaluate(OPTIMIZATION, indexes, best_before, feedback,
                                                          recommendations)
        judged = [a for a in attempts if not a.endpoint_failure]
        if judged:
            st.last_optimization = min(judged, key=lambda a: (a.candidate_ms is None, a.candidate_ms or 0.0,
                                                              _STATUS_RANK.get(a.status, 9)))
        for a in judged:
            st.history.append(_history_entry(a, best_before))
        improved = st.best is not best_before
        st.steps_without_improvement = 0 if improved else st.steps_without_improvement + 1
        if cfg.patience and st.steps_without_improvement >= cfg.patience:
            self.stop_reason = f"patience: {cfg.patience} optimization step(s) without a faster correct program"
            return Next.STOP
        if st.optimization_steps >= cfg.max_optimization_iters:
            self.stop_reason = f"optimization budget spent ({cfg.max_optimization_iters} step(s))"
            return Next.STOP
        return Next.OPTIMIZE

    def _start_iterations(self, pass_name: str) -> Iterator[LoopEvent]:
        indexes = list(range(self.state.next_iteration, self.state.next_iteration + self.config.best_of_k))
        self.state.next_iteration += len(indexes)
        for index in indexes:
            self._open[index] = pass_name
            yield IterationStarted(iteration=index, pass_name=pass_name)
        return indexes

    # ------------------------------------------------------------------------------------------ analysis
    def _analyse(self, iteration: int, best: Attempt) -> Iterator[LoopEvent]:
        verdict = best.verdict
        request = AnalysisRequest(
            program=best.code or "", problem_source=self.problem.source, target=self.platform.name,
            platform_title=self.platform.title, profile=verdict.profile if verdict else None,
            roofline=verdict.roofline if verdict else None, candidate_ms=best.candidate_ms,
            eager_ms=verdict.eager_ms if verdict else None, compiled_ms=verdict.compiled_ms if verdict else None,
            screenshots=[Path(p).expanduser().read_bytes() for p in self.config.screenshots],
            history=list(self.state.history))
        agent = self.analyzer
        # LLM agents say what they will send before the call (so the record reads prompt, then the streamed reply);
        # rule-based agents have no prompt method, and their result's `prompt` (if any) is recorded afterwards.
        prompt = getattr(agent, "prompt", None)
        if prompt is not None:
            yield PromptSent(iteration=iteration, agent="analysis", model=_model_name(agent),
                             messages=_for_record(prompt(request)))
        outcome = yield from self._stream({iteration: lambda on_token: agent.analyze(request, on_token)}, "analysis")
        result, error = outcome[iteration]
        if error is not None:
            yield from self._endpoint_failure(error, "analysis", iteration)
            return []
        self.state.endpoint_failures_in_a_row = 0
        yield from self._usage(iteration, "analysis", result.usage)
        notes = "; ".join(n for n in (getattr(result, "notes", ""), result.error or "") if n)
        yield RecommendationsReady(iteration=iteration, recommendations=list(result.recommendations),
                                   text=result.text, agent_label=agent.label, analyzed_iteration=best.iteration,
                                   notes=notes)
        return list(result.recommendations)

    # ------------------------------------------------------------------------------------------ generation
    def _request(self, pass_name: str, iteration: int, base: Attempt | None,
                 feedback: Feedback | None) -> GenerationRequest:
        p = self.platform
        return GenerationRequest(
            problem_source=self.problem.source, problem_name=self.problem.name, target=p.name,
            platform_title=p.title, example_problem=self._example_problem, example_candidate=self._example_candidate,
            kernel_language=p.kernel_language, pass_name=pass_name, iteration=iteration,
            previous_program=base.code if base is not None else None, feedback=feedback,
            reference_program=self.config.reference_program, reference_target=self.config.reference_target,
            candidate_api=tuple(p.candidate_api), platform_module=p.module_name)

    def _generate_and_evaluate(self, pass_name: str, indexes: list[int], base: Attempt | None,
                               feedback: Feedback | None,
                               recommendations: list[Recommendation]) -> Iterator[LoopEvent]:
        agent = self.generator
        requests = {i: self._request(pass_name, i, base, feedback) for i in indexes}
        prompt = getattr(agent, "prompt", None)  # see _analyse
        if prompt is not None:
            for i, request in requests.items():
                yield PromptSent(iteration=i, agent="generation", model=_model_name(agent),
                                 messages=_for_record(prompt(request)))
        jobs = {i: (lambda on_token, r=request: agent.generate(r, on_token)) for i, request in requests.items()}
        outcomes = yield from self._stream(jobs, "generation")
        attempts = []
        for i in indexes:
            self._check_cancel()
            result, error = outcomes[i]
            if error is not None:
                attempt = yield from self._endpoint_failure(error, "generation", i, pass_name)
            else:
                self.state.endpoint_failures_in_a_row = 0
                if prompt is None and result.prompt:
                    yield PromptSent(iteration=i, agent="generation", model=_model_name(agent),
                                     messages=_for_record(result.prompt))
                yield from self._usage(i, "generation", result.usage)
                attempt = yield from self._judge(i, pass_name, result, base, recommendations)
            attempts.append(attempt)
            if attempt.endpoint_failure and self.state.endpoint_failures_in_a_row >= MAX_ENDPOINT_FAILURES:
                raise FatalEndpointError(f"the model endpoint failed {MAX_ENDPOINT_FAILURES} times in a row; "
                                         f"last error: {attempt.reason}")
        return attempts

    def _judge(self, i: int, pass_name: str, result: GenerationResult, base: Attempt | None,
               recommendations: list[Recommendation]) -> Iterator[LoopEvent]:
        recs = [r.to_dict() for r in recommendations] or None
        if result.program is None:
            error = result.error or "the reply held no program"
            yield ProgramMissing(iteration=i, error=error, reply_excerpt=_excerpt(result.reply_text))
            attempt = Attempt(i, pass_name, "no_program", error, recommendations=recommendations)
            yield self._finished(attempt, recs)
            return attempt
        code = result.program
        yield ProgramExtracted(iteration=i, code=code, language="python", notes=result.notes)
        if base is not None and base.code is not None:
            yield Diff(iteration=i, against_iteration=base.iteration, unified_diff=unified_diff(base, i, code))
        self._check_cancel()
        verdict = self._evaluate(self.problem, code, self.platform.name, self._eval_options(pass_name))
        if verdict.compile_log.strip():
            yield CompileLog(iteration=i, log=verdict.compile_log)
        yield VerdictReady(iteration=i, verdict=verdict.to_dict())
        if verdict.candidate is not None:
            yield Timings(iteration=i, candidate_ms=verdict.candidate_ms, eager_ms=verdict.eager_ms,
                          compiled_ms=verdict.compiled_ms, speedup_vs_eager=verdict.speedup_vs_eager,
                          speedup_vs_compiled=verdict.speedup_vs_compiled, torch_compile_s=verdict.torch_compile_s)
        if verdict.profile is not None or verdict.roofline is not None:
            yield ProfileReady(iteration=i, profile=verdict.profile, roofline=verdict.roofline)
        attempt = Attempt(i, pass_name, verdict.status, verdict.reason, code, verdict, recommendations)
        yield self._finished(attempt, recs)
        if attempt.correct and _faster(attempt, self.state.best):
            self.state.best = attempt
            yield BestUpdated(iteration=i, candidate_ms=verdict.candidate_ms,
                              speedup_vs_eager=verdict.speedup_vs_eager,
                              speedup_vs_compiled=verdict.speedup_vs_compiled, eager_ms=verdict.eager_ms,
                              compiled_ms=verdict.compiled_ms)
        return attempt

    def _eval_options(self, pass_name: str) -> EvalOptions:
        cfg = self.config
        # The evaluator times and profiles only correct candidates, so failures cost nothing extra. A correct
        # functional candidate becomes the best the analysis agent reads, so it is profiled too whenever an
        # optimization pass follows: re-running it just for a profile would cost another child process.
        profile = self.platform.has_profiler and (pass_name == OPTIMIZATION or cfg.max_optimization_iters > 0)
        return EvalOptions(tolerance=cfg.tolerance, timing=True, baselines=cfg.eval_baselines, profile=profile,
                           size_class=cfg.size_class, timeout_s=cfg.eval_timeout_s,
                           timing_options=dict(cfg.eval_timing_options))

    def _finished(self, attempt: Attempt, recommendations: list[dict] | None = None) -> IterationFinished:
        self._open.pop(attempt.iteration, None)
        v = attempt.verdict
        return IterationFinished(
            iteration=attempt.iteration, pass_name=attempt.pass_name, status=attempt.status, reason=attempt.reason,
            code=attempt.code, candidate_ms=v.candidate_ms if v else None,
            speedup_vs_eager=v.speedup_vs_eager if v else None,
            speedup_vs_compiled=v.speedup_vs_compiled if v else None, verdict=v.to_dict() if v else None,
            profile=v.profile if v else None, recommendations=recommendations)

    def _endpoint_failure(self, error: BaseException, where: str, iteration: int,
                          pass_name: str | None = None) -> Iterator[LoopEvent]:
        """An agent call raised: cancel and bugs propagate; endpoint errors become data (or stop the run)."""
        if isinstance(error, (Cancelled, KeyboardInterrupt)):
            raise Cancelled() from None
        if not isinstance(error, LLMError):
            raise error
        message = f"{ENDPOINT_FAILED} ({where}): {error}"
        yield ErrorReported(message=message, where=where, iteration=iteration)
        if isinstance(error, FATAL_LLM_ERRORS):
            raise FatalEndpointError(message) from None
        self.state.endpoint_failures_in_a_row += 1
        if pass_name is None:  # analysis: the generation goes on without recommendations
            if self.state.endpoint_failures_in_a_row >= MAX_ENDPOINT_FAILURES:
                raise FatalEndpointError(f"the model endpoint failed {MAX_ENDPOINT_FAILURES} times in a row; "
                                         f"last error: {error}")
            return None
        partial = error.partial_text if isinstance(error, LLMStreamError) else ""
        yield ProgramMissing(iteration=iteration, error=message, reply_excerpt=_excerpt(partial))
        attempt = Attempt(iteration, pass_name, "no_program", message, endpoint_failure=True)
        yield self._finished(attempt)
        return attempt

    def _usage(self, iteration: int, agent: str, usage) -> Iterator[LoopEvent]:
        tokens = (usage.prompt_tokens or 0) + (usage.completion_tokens or 0)
        if tokens == 0:
            return  # a rule-based agent: nothing to account
        self.state.tokens_used += tokens
        yield UsageRecorded(iteration=iteration, agent=agent, prompt_tokens=usage.prompt_tokens,
                            completion_tokens=usage.completion_tokens, model=usage.model, latency_s=usage.latency_s,
                            estimated=usage.estimated)

    # ------------------------------------------------------------------------------------------ streaming
    def _stream(self, jobs: dict[int, Callable[[Callable[[str], None]], Any]],
                agent: str) -> Iterator[LoopEvent]:
        """Run agent calls in threads (all at once: a best-of-k step), yielding their tokens as they arrive.
        Returns {iteration: (result, None) | (None, exception)}.

        Threads, even for one call, because a generator cannot yield from inside the client's on_token callback.
        On cancel the threads are abandoned: each stops at its next token (on_token raises), and a call stuck
        waiting for its first byte ends with the client's own timeout."""
        inbox: queue.Queue = queue.Queue()

        def run(i: int, job) -> None:
            def on_token(text: str) -> None:
                if self._cancel.is_set():
                    raise Cancelled()
                inbox.put(("token", i, text))
            try:
                inbox.put(("done", i, (job(on_token), None)))
            except BaseException as e:  # noqa: BLE001 - handed to the loop's thread, which decides
                inbox.put(("done", i, (None, e)))

        for i, job in jobs.items():
            threading.Thread(target=run, args=(i, job), name=f"kforge-{agent}-{i}", daemon=True).start()
        results: dict[int, tuple] = {}
        while len(results) < len(jobs):
            try:
                what, i, payload = inbox.get(timeout=0.25)
            except queue.Empty:
                self._check_cancel()
                continue
            self._check_cancel()
            if what == "token":
                yield Tokens(iteration=i, agent=agent, text=payload)
            else:
                results[i] = payload
        return results


# ---------------------------------------------------------------------------------------------- helpers


def _faster(attempt: Attempt, best: Attempt | None) -> bool:
    if best is None:
        return True
    if attempt.candidate_ms is None:
        return False
    return best.candidate_ms is None or attempt.candidate_ms < best.candidate_ms


def _feedback(attempt: Attempt) -> Feedback:
    v = attempt.verdict
    log = ""
    if v is not None:
        log = v.compile_log or (v.log_tail if attempt.status in ("runtime_error", "timeout") else "")
    reason = attempt.reason
    if v is not None and attempt.status == "incorrect":
        failed = [c.get("detail") or c.get("name") for c in v.checks if not c.get("passed")]
        extra = [d for d in failed if d and d not in reason]
        if extra:
            reason += "\nFailed checks: " + "; ".join(extra[:5])
    return Feedback(status=attempt.status, reason=reason, compile_log=log or "",
                    candidate_ms=v.candidate_ms if v else None, eager_ms=v.eager_ms if v else None,
                    compiled_ms=v.compiled_ms if v else None)


def _optimization_feedback(best: Attempt, last: Attempt | None,
                           recommendations: list[Recommendation]) -> Feedback:
    """About the best program (which the model rewrites), plus why the latest attempt was not kept, if it wasn't."""
    fb = _feedback(best)
    fb.recommendations = list(recommendations)
    if last is not None and last is not best and last.iteration > best.iteration:
        if last.correct:
            ms = f" ({last.candidate_ms:.4g} ms)" if last.candidate_ms is not None else ""
            fb.reason += (f"\nYour latest attempt (iteration {last.iteration}) was correct but not faster{ms}; "
                          "try a different change.")
        else:
            fb.reason += (f"\nYour latest attempt (iteration {last.iteration}) was not kept: {last.status}: "
                          f"{last.reason}")
            last_fb = _feedback(last)
            fb.compile_log = last_fb.compile_log
    return fb


def _history_entry(attempt: Attempt, best_before: Attempt) -> dict:
    tried = "; ".join(r.title for r in attempt.recommendations) or "a rewrite"
    if attempt.correct and attempt.candidate_ms is not None and best_before.candidate_ms:
        outcome = f"correct, {attempt.candidate_ms:.4g} ms vs {best_before.candidate_ms:.4g} ms before " \
                  f"({best_before.candidate_ms / attempt.candidate_ms:.2f}x)"
    else:
        outcome = f"{attempt.status}: {attempt.reason[:200]}"
    # The AnalysisRequest.history contract: what was tried (titles, and catalogue moves for the built-in agent),
    # what it measured, in words and as numbers.
    return {"iteration": attempt.iteration, "tried": tried, "outcome": outcome, "status": attempt.status,
            "candidate_ms": attempt.candidate_ms, "best_ms_before": best_before.candidate_ms,
            "recommendations": [r.to_dict() for r in attempt.recommendations],
            "moves": [r.move for r in attempt.recommendations if r.move]}


def unified_diff(base: Attempt, iteration: int, code: str) -> str:
    return "".join(difflib.unified_diff(
        (base.code or "").splitlines(keepends=True), code.splitlines(keepends=True),
        fromfile=f"iteration {base.iteration}", tofile=f"iteration {iteration}"))


def _excerpt(text: str) -> str:
    text = text or ""
    if len(text) <= REPLY_EXCERPT_CHARS:
        return text
    half = REPLY_EXCERPT_CHARS // 2
    return text[:half] + f"\n… ({len(text) - 2 * half} characters) …\n" + text[-half:]


def _model_name(agent: Any) -> str:
    return getattr(agent, "model", None) or agent.label


def _for_record(messages: list[dict]) -> list[dict]:
    """Messages as stored in `prompt_sent`: image data URLs (megabytes of base64) replaced by a short note."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    url = (part.get("image_url") or {}).get("url", "")
                    mime = url[5:url.find(";")] if url.startswith("data:") and ";" in url else "image"
                    parts.append({"type": "image_url",
                                  "image_url": {"url": f"[{mime}, {math.ceil(len(url) * 3 / 4)} bytes, not stored]"}})
                else:
                    parts.append(part)
            m = {**m, "content": parts}
        out.append(m)
    return out
