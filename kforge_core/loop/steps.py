"""One step's work with the agents: the analysis call, the k generation calls, and each candidate judged.

`CandidateSteps` is the half of `Synthesis` (see engine.py) that turns a step's decision into events: it
records the prompts, streams the replies, accounts the tokens, turns endpoint failures into data (or stops the
run), evaluates each program (one at a time) and finishes its iteration, updating the best. Which step runs
next, the budgets and the run's end stay in the engine.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import asdict
import inspect
import math
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..agents.base import (
    AnalysisAgent, AnalysisRequest, Feedback, GenerationAgent, GenerationRequest, GenerationResult, Recommendation,
    Usage)
from ..agents.facts import evaluation_facts
from ..eval.evaluator import EvalOptions, EvaluationCancelled
from ..eval.verdict import Verdict
from ..llm import LLMError, LLMStreamError
from ..platform import TargetSpec
from .config import RunConfig
from .events import (
    BestUpdated, CompileLog, Diff, ErrorReported, EvalStage, IterationFinished, IterationStarted, LoopEvent,
    ProfileReady,
    ProgramExtracted, ProgramMissing, PromptSent, RecommendationsReady, Retrying, Timings, UsageRecorded,
    VerdictReady)
from .streaming import AgentJob, EvaluationAhead, stream_calls
from .types import (
    ENDPOINT_FAILED, FATAL_LLM_ERRORS, NOT_FATAL_LLM_ERRORS, OPTIMIZATION, START, Attempt, Cancelled,
    FatalEndpointError,
    LoopState, is_faster)

REPLY_EXCERPT_CHARS = 2000


class CandidateSteps:
    """Agent calls and candidate evaluation, for `Synthesis`, which sets these attributes."""

    config: RunConfig
    state: LoopState
    generator: GenerationAgent
    analyzer: AnalysisAgent
    problem: Any
    platform: Any
    spec: TargetSpec  # the platform as the agents see it, resolved once for the run
    _evaluate: Callable[..., Verdict]
    _cancel: threading.Event
    _open: dict[int, str]  # iterations started and not finished -> pass
    _facts: str | None  # evaluation_facts, worked out once per run
    _check_cancel: Callable[[], None]  # raises Cancelled once the run is asked to stop
    _should_cancel: Callable[[], bool]
    parallel_evaluations: bool  # a best-of-k step's programs are evaluated at once (each on its own device)

    # ------------------------------------------------------------------------------------------ start program
    def _judge_start_program(self) -> Iterator[LoopEvent]:
        """A run given a starting program (`RunConfig.start_program`) judges it first, as iteration 0 of a "start"
        pass: correct, it is the best the optimization pass starts from; not, it is the program the functional
        pass fixes (with its verdict fed back). Once judged, a resume does not judge it again."""
        code = self.config.start_program
        if not code or self.state.next_iteration != 0:
            return
        self.state.next_iteration = 1
        self._open[0] = START
        yield IterationStarted(iteration=0, pass_name=START)
        result = GenerationResult(program=code, notes="the starting program (written by a person)")
        attempt = yield from self._judge(0, START, result, None, [])
        self.state.last = attempt

    # ------------------------------------------------------------------------------------------ analysis
    def _analyse(self, iteration: int, best: Attempt) -> Iterator[LoopEvent]:
        verdict = best.verdict
        request = AnalysisRequest(
            program=best.code or "", problem_source=self.problem.source, spec=self.spec,
            profile=verdict.profile if verdict else None,
            roofline=verdict.roofline if verdict else None, candidate_ms=best.candidate_ms,
            eager_ms=verdict.eager_ms if verdict else None, compiled_ms=verdict.compiled_ms if verdict else None,
            screenshots=self._screenshots_for(best), screenshots_note=self._screenshots_note(best),
            history=list(self.state.history), evaluation=self._evaluation_facts(), iteration=best.iteration)
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
        yield from self._usage(iteration, "analysis", result.usage, agent)
        notes = "; ".join(n for n in (getattr(result, "notes", ""), result.error or "") if n)
        yield RecommendationsReady(iteration=iteration, recommendations=list(result.recommendations),
                                   text=result.text, agent_label=agent.label, analyzed_iteration=best.iteration,
                                   notes=notes)
        return list(result.recommendations)

    def _screenshots_for(self, best: Attempt) -> list[bytes]:
        """The user's screenshots go only to the analysis of the program they show: the iteration named by
        `screenshots_of`, or (not named: taken before the run) the first analysis only."""
        if not self.config.screenshots or not self._screenshots_apply(best):
            return []
        return [Path(p).expanduser().read_bytes() for p in self.config.screenshots]

    def _screenshots_apply(self, best: Attempt) -> bool:
        of = self.config.screenshots_of
        if of is not None:
            return best.iteration == of
        return self.state.optimization_steps <= 1

    def _screenshots_note(self, best: Attempt) -> str:
        if not self.config.screenshots or not self._screenshots_apply(best) or self.config.screenshots_of is not None:
            return ""
        return ("They were taken before this run (of the PyTorch reference or an earlier program), not of the "
                "program above: use them for where the time goes in the problem, not as this program's profile.")

    def _evaluation_facts(self) -> str:
        if self._facts is None:
            self._facts = evaluation_facts(self.problem.source, self.platform, self.config.size_class,
                                           self.config.tolerance)
        return self._facts

    # ------------------------------------------------------------------------------------------ generation
    def _request(self, pass_name: str, iteration: int, base: Attempt | None,
                 feedback: Feedback | None) -> GenerationRequest:
        if feedback is not None and pass_name == OPTIMIZATION and base is not None and base.verdict is not None:
            feedback.profile, feedback.roofline = base.verdict.profile, base.verdict.roofline
            feedback.history = [_history_text(h) for h in self.state.history]
        return GenerationRequest(
            problem_source=self.problem.source, problem_name=self.problem.name, spec=self.spec, pass_name=pass_name,
            iteration=iteration, previous_program=base.code if base is not None else None, feedback=feedback,
            reference_program=self.config.reference_program, reference_target=self.config.reference_target,
            evaluation=self._evaluation_facts())

    def _generate_and_evaluate(self, pass_name: str, indexes: list[int], base: Attempt | None,
                               feedback: Feedback | None,
                               recommendations: list[Recommendation]) -> Iterator[LoopEvent]:
        agent = self.generator
        requests = {i: self._request(pass_name, i, base, feedback) for i in indexes}
        prompt = getattr(agent, "prompt", None)  # see _analyse
        sent: dict[int, list[dict]] = {}
        if prompt is not None:
            for i, request in requests.items():
                sent[i] = prompt(request)
                yield PromptSent(iteration=i, agent="generation", model=_model_name(agent),
                                 messages=_for_record(sent[i]))
        jobs = {i: (lambda on_token, r=request: agent.generate(r, on_token)) for i, request in requests.items()}
        outcomes = yield from self._stream(jobs, "generation")
        ahead = self._evaluations_ahead(pass_name, indexes, outcomes, base)
        try:
            attempts = []
            for i in indexes:
                self._check_cancel()
                result, error = outcomes[i]
                if error is not None:
                    attempt = yield from self._endpoint_failure(error, "generation", i, pass_name)
                else:
                    self.state.endpoint_failures_in_a_row = 0
                    if result.prompt and result.prompt != sent.get(i):  # no prompt method, or one clipped again
                        yield PromptSent(iteration=i, agent="generation", model=_model_name(agent),
                                         messages=_for_record(result.prompt))
                    yield from self._usage(i, "generation", result.usage, agent)
                    attempt = yield from self._judge(i, pass_name, result, base, recommendations, ahead.get(i))
                attempts.append(attempt)
            return attempts
        finally:
            if any(job.running() for job in ahead.values()):  # the step stopped early: their evaluations too
                self._cancel.set()
            for job in ahead.values():
                job.join()

    def _evaluations_ahead(self, pass_name: str, indexes: list[int], outcomes: dict,
                           base: Attempt | None) -> dict[int, EvaluationAhead]:
        """With `parallel_evaluations` (each evaluation on a device of its own, e.g. a Ray task): every program of
        the step starts evaluating now, in its own thread; the step then records them in iteration order, as it
        would have evaluated them one by one. Without it (one device here): nothing starts ahead."""
        programs = [i for i in indexes if outcomes[i][1] is None and outcomes[i][0].program is not None]
        if not self.parallel_evaluations or len(programs) < 2:
            return {}
        return {i: EvaluationAhead(self._candidate_verdict(i, outcomes[i][0], base, pass_name), i)
                for i in programs}

    def _stream(self, jobs: dict[int, AgentJob], agent: str) -> Iterator[LoopEvent]:
        return (yield from stream_calls(jobs, agent, self._cancel, self._check_cancel))

    # ------------------------------------------------------------------------------------------ evaluation
    def _judge(self, i: int, pass_name: str, result: GenerationResult, base: Attempt | None,
               recommendations: list[Recommendation],
               ahead: EvaluationAhead | None = None) -> Iterator[LoopEvent]:
        recommendations = applied_recommendations(recommendations, result.moves)
        recs = [r.to_dict() for r in recommendations] or None
        if result.program is None:
            error = result.error or "the reply held no program"
            yield ProgramMissing(iteration=i, error=error, reply_excerpt=_excerpt(result.reply_text),
                                 coverage=result.coverage, unsupported=result.unsupported)
            attempt = Attempt(i, pass_name, "no_program", error, recommendations=recommendations,
                              unsupported=result.unsupported)
            yield self._finished(attempt, recs)
            return attempt
        verdict_events = ahead.replay(self._check_cancel) if ahead is not None else \
            self._candidate_verdict(i, result, base, pass_name)
        code, verdict = yield from verdict_events
        attempt = Attempt(i, pass_name, verdict.status, verdict.reason, code, verdict, recommendations)
        yield self._finished(attempt, recs)
        if attempt.correct:
            self.state.correct_attempts.append(attempt)
        if attempt.correct and is_faster(attempt, self.state.best):
            self.state.best = attempt
            self.state.best_speedups = (verdict.speedup_vs_eager, verdict.speedup_vs_compiled)
            yield BestUpdated(iteration=i, candidate_ms=verdict.candidate_ms,
                              speedup_vs_eager=verdict.speedup_vs_eager,
                              speedup_vs_compiled=verdict.speedup_vs_compiled, eager_ms=verdict.eager_ms,
                              compiled_ms=verdict.compiled_ms)
        return attempt

    def _candidate_verdict(self, i: int, result: GenerationResult, base: Attempt | None,
                           pass_name: str) -> Iterator[LoopEvent]:
        """A program's evaluation and the events that report it; returns (code, verdict). It changes no loop state,
        so several may run at once (EvaluationAhead)."""
        code, verdict = yield from self._first_that_compiles(i, result, pass_name)
        if base is not None and base.code is not None:
            yield Diff(iteration=i, against_iteration=base.iteration, unified_diff=unified_diff(base, i, code))
        if verdict.status == "correct" and verdict.noisy:
            # a number beyond the noise bound is not trusted as it is: timed once more, the steadier one kept
            yield EvalStage(iteration=i, stage="re-timing: noisy timing", detail={"noisy": ",".join(verdict.noisy)})
            again = yield from self._evaluate_live(i, code, self._eval_options(pass_name))
            if again.status == "correct" and len(again.noisy) <= len(verdict.noisy):
                again.warnings.append(f"re-timed: the first evaluation's timings were noisy "
                                      f"({', '.join(verdict.noisy)}); these are from a second one")
                verdict = again
        if verdict.compile_log.strip():
            yield CompileLog(iteration=i, log=verdict.compile_log)
        yield VerdictReady(iteration=i, verdict=verdict.to_dict())
        if verdict.candidate is not None:
            yield Timings(iteration=i, candidate_ms=verdict.candidate_ms, eager_ms=verdict.eager_ms,
                          compiled_ms=verdict.compiled_ms, speedup_vs_eager=verdict.speedup_vs_eager,
                          speedup_vs_compiled=verdict.speedup_vs_compiled, torch_compile_s=verdict.torch_compile_s,
                          **{k: asdict(t) if t else None for k, t in (("candidate", verdict.candidate),
                                                                       ("eager", verdict.eager),
                                                                       ("compiled", verdict.compiled))},
                          baseline_shared=bool(verdict.baseline), noisy=tuple(verdict.noisy))
        if verdict.profile is not None or verdict.roofline is not None:
            yield ProfileReady(iteration=i, profile=verdict.profile, roofline=verdict.roofline)
        return code, verdict

    def _first_that_compiles(self, i: int, result: GenerationResult,
                             pass_name: str) -> Iterator[LoopEvent]:
        """Evaluate the reply's program; while it does not compile, the reply's other programs in turn (see
        extract.Extraction.alternatives). The first that compiles is the iteration's program; when none does,
        the first one tried, with its compiler output. Returns (code, verdict)."""
        candidates = [result.program, *getattr(result, "alternatives", [])]
        yield ProgramExtracted(iteration=i, code=candidates[0], language="python", notes=result.notes,
                               coverage=result.coverage)
        first: tuple[str, Verdict] | None = None
        for n, code in enumerate(candidates):
            self._check_cancel()
            if n:
                yield ProgramExtracted(iteration=i, code=code, language="python",
                                       notes=f"the program before did not compile; trying the reply's program "
                                             f"{len(candidates) - n} of {len(candidates)} (counting from the top)")
            verdict = yield from self._evaluate_live(i, code, self._eval_options(pass_name))
            if first is None:
                first = (code, verdict)
            if verdict.status != "compile_error":
                return code, verdict
        assert first is not None
        if len(candidates) > 1:  # none compiled: the record keeps the reply's final program and its errors
            yield ProgramExtracted(iteration=i, code=first[0], language="python",
                                   notes=f"none of the reply's {len(candidates)} programs compiled; the last one's "
                                         "errors are shown")
        return first

    def _evaluate_live(self, i: int | None, code, options: EvalOptions, evaluate_fn=None) -> Iterator[LoopEvent]:
        """Run one evaluation in a thread and yield its stages as they come; a cancel kills its process group at
        once (the evaluator polls `_cancel_requested`) and raises Cancelled here."""
        stages: queue.Queue = queue.Queue()
        box: dict = {}
        fn = evaluate_fn or self._evaluate

        def work() -> None:
            try:
                kwargs = {}
                if _accepts(fn, "on_stage"):
                    kwargs = {"on_stage": stages.put, "cancel": self._cancel_requested}
                box["verdict"] = fn(self.problem, code, self.platform.name, options, **kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised in the loop's thread
                box["error"] = e
            finally:
                stages.put(None)

        worker = threading.Thread(target=work, daemon=True, name=f"kforge-eval-{i}")
        worker.start()
        try:
            while True:
                try:
                    item = stages.get(timeout=0.1)
                except queue.Empty:
                    self._cancel_requested()  # sets the flag the evaluator polls
                    continue
                if item is None:
                    break
                item = dict(item)
                yield EvalStage(iteration=i, stage=str(item.pop("stage", "")), detail=item)
        except BaseException:  # Ctrl-C, or the consumer closed the stream: the evaluation must not run on
            self._cancel.set()
            worker.join(timeout=10)
            raise
        worker.join()
        if "error" in box:
            if isinstance(box["error"], EvaluationCancelled):
                raise Cancelled()
            raise box["error"]
        return box["verdict"]

    def _cancel_requested(self) -> bool:
        if not self._cancel.is_set() and self._should_cancel():
            self._cancel.set()
        return self._cancel.is_set()

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

    # ------------------------------------------------------------------------------------------ failures, usage
    def _endpoint_failure(self, error: BaseException, where: str, iteration: int,
                          pass_name: str | None = None) -> Iterator[LoopEvent]:
        """An agent call raised: cancel and bugs propagate; endpoint errors become data, a wait before the next
        step, or the run's stop (a refusal that cannot change, too many failures in a row, too long a wait)."""
        if isinstance(error, (Cancelled, KeyboardInterrupt)):
            raise Cancelled() from None
        if not isinstance(error, LLMError):
            raise error
        cfg, st = self.config, self.state
        message = f"{ENDPOINT_FAILED} ({where}): {error}"
        yield ErrorReported(message=message, where=where, iteration=iteration)
        if error.prompt_tokens or error.completion_tokens:  # a broken stream: what it cost, estimated
            agent = self.analyzer if where == "analysis" else self.generator
            yield from self._usage(iteration, where, Usage(error.prompt_tokens, error.completion_tokens,
                                                           model=_model_name(agent), estimated=True), agent,
                                   failed=True)
        stop = None
        if isinstance(error, FATAL_LLM_ERRORS) and not isinstance(error, NOT_FATAL_LLM_ERRORS):
            stop = message
        else:
            st.endpoint_failures_in_a_row += 1
            retry_after = getattr(error, "retry_after_s", None)
            if st.endpoint_failures_in_a_row >= cfg.max_endpoint_failures:
                status = f", HTTP {error.status}" if error.status else ""
                stop = (f"the model endpoint failed {st.endpoint_failures_in_a_row} times in a row (last: "
                        f"{type(error).__name__}{status})")
            elif retry_after is not None and retry_after > cfg.endpoint_max_wait_s:
                stop = (f"the model endpoint asks to wait {retry_after:g} s, longer than endpoint_max_wait_s "
                        f"({cfg.endpoint_max_wait_s:g} s)")
            else:
                n = st.endpoint_failures_in_a_row
                wait = retry_after if retry_after is not None else \
                    min(cfg.endpoint_max_wait_s, cfg.endpoint_backoff_s * 2 ** (n - 1))
                st.endpoint_wait_s = max(st.endpoint_wait_s, wait)
                yield Retrying(iteration=iteration, agent=where, attempt=n, delay_s=wait, error=str(error),
                               where="loop")
        attempt = None
        if pass_name is not None:  # analysis failing: the generation goes on without recommendations
            partial = error.partial_text if isinstance(error, LLMStreamError) else ""
            yield ProgramMissing(iteration=iteration, error=message, reply_excerpt=_excerpt(partial))
            attempt = Attempt(iteration, pass_name, "no_program", message, endpoint_failure=True)
            yield self._finished(attempt)
        if stop is not None:
            raise FatalEndpointError(f"{stop}; resume the run later (`runs resume RUN_ID`, or Resume in the app) "
                                     "once the endpoint works",
                                     reported=stop == message)  # a new summary line otherwise, not a repeat
        return attempt

    def _usage(self, iteration: int, agent_role: str, usage, agent: Any = None,
               failed: bool = False) -> Iterator[LoopEvent]:
        tokens = (usage.prompt_tokens or 0) + (usage.completion_tokens or 0)
        if tokens == 0:
            return  # a rule-based agent: nothing to account
        self.state.tokens_used += tokens
        price = getattr(agent, "price_per_mtok", None)
        cost = None
        if price:
            cost = round((price[0] * usage.prompt_tokens + price[1] * usage.completion_tokens) / 1e6, 6)
        yield UsageRecorded(iteration=iteration, agent=agent_role, prompt_tokens=usage.prompt_tokens,
                            completion_tokens=usage.completion_tokens, model=usage.model, latency_s=usage.latency_s,
                            estimated=usage.estimated, failed=failed, warning=getattr(usage, "warning", ""),
                            cost=cost)


# ---------------------------------------------------------------------------------------------- record helpers


def applied_recommendations(recommendations: list[Recommendation],
                            moves: list[str] | None) -> list[Recommendation]:
    """The step's recommendations, each marked with whether this candidate was built with it. A generator that
    names its moves (the built-in one builds one per step) leaves the others untried for later steps."""
    if moves is None:
        return list(recommendations)
    return [dataclasses.replace(r, applied=r.move in moves) for r in recommendations]


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


def _history_text(entry: dict) -> str:
    return f"iteration {entry.get('iteration')}: {entry.get('tried') or 'a rewrite'} -> {entry.get('outcome')}"


def _accepts(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


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
