"""One step's work with the agents: the analysis call and the k generation calls.

`CandidateSteps` is the half of `Synthesis` (see engine.py) that turns a step's decision into events: it
records the prompts, streams the replies, accounts the tokens, turns endpoint failures into data (or stops the
run) and hands each program to `Judging` (judging.py), which evaluates it (one at a time) and finishes its
iteration, updating the best. Which step runs next, the budgets and the run's end stay in the engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..agents.base import (
    AnalysisAgent, AnalysisRequest, Feedback, GenerationAgent, GenerationRequest, Recommendation, Usage)
from ..agents.facts import evaluation_facts
from ..llm import LLMError, LLMStreamError
from ..platform import TargetSpec
from .events import (
    ErrorReported, LoopEvent, ProgramMissing, PromptSent, RecommendationsReady, Retrying, UsageRecorded)
from .judging import Judging
from .records import excerpt, for_record, history_text, model_name
from .streaming import AgentJob, EvaluationAhead, stream_calls
from .types import (
    ENDPOINT_FAILED, FATAL_LLM_ERRORS, NOT_FATAL_LLM_ERRORS, OPTIMIZATION, Attempt, Cancelled, FatalEndpointError)


class CandidateSteps(Judging):
    """Agent calls, for `Synthesis`, which sets these attributes (and `Judging`'s)."""

    generator: GenerationAgent
    analyzer: AnalysisAgent
    spec: TargetSpec  # the platform as the agents see it, resolved once for the run
    _facts: str | None  # evaluation_facts, worked out once per run
    parallel_evaluations: bool  # a best-of-k step's programs are evaluated at once (each on its own device)

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
            yield PromptSent(iteration=iteration, agent="analysis", model=model_name(agent),
                             messages=for_record(prompt(request)))
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
            feedback.history = [history_text(h) for h in self.state.history]
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
                yield PromptSent(iteration=i, agent="generation", model=model_name(agent),
                                 messages=for_record(sent[i]))
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
                        yield PromptSent(iteration=i, agent="generation", model=model_name(agent),
                                         messages=for_record(result.prompt))
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
                                                           model=model_name(agent), estimated=True), agent,
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
            yield ProgramMissing(iteration=iteration, error=message, reply_excerpt=excerpt(partial))
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
