"""The synthesis loop: a functional pass, then an optimization pass, as one generator of typed events.

    functional step   generate k candidates (in parallel) -> evaluate each (one at a time; at once on Ray) -> feedback
                      -> RETRY until a candidate is correct, then OPTIMIZE (or STOP: budget, no optimization pass)
    optimization step analyse the best (profile, roofline, timings, screenshots, what was tried)
                      -> regenerate from the best with the recommendations -> evaluate -> keep the fastest correct
                      -> OPTIMIZE, or STOP (iterations, patience)

Each step returns a `Next` value and `Synthesis.events` only dispatches on it. Budgets (wall time, tokens) and the
cancel flag are checked between steps; the cancel flag also at every streamed token. The event stream always ends
with exactly one `RunFinished`, whatever happens inside (a cancel, a fatal endpoint error, a bug: a bug is reported
as an event first, then re-raised).

A deterministic generator (the built-in one) that answers a step without a program ends the pass with its reason:
the same request would get the same answer. An agent that says it cannot write the problem at all
(`GenerationResult.unsupported`) on the first functional step ends the run `unsupported`, with its reason, after
that one step: not a failure of the run, the edge of the agent's reach.

The model's mistakes are data: a compile error, a wrong kernel, a reply without a program end an iteration with
that status and are fed back to the next generation. An endpoint failure (timeout, 5xx, broken stream after the
client's retries) also ends the iteration (`no_program`, with the reason) but does not use up a step: the loop
waits (`endpoint_backoff_s`, doubling; a 429's Retry-After up to `endpoint_max_wait_s`) and goes on, until
`max_endpoint_failures` calls in a row have failed or the server asks for a longer wait; a refusal that would
repeat identically (bad key, unknown model) stops the run at once. A run stopped by its endpoint keeps its best
program: it ends `succeeded` when it holds one (the stop reason says to resume later), `failed` otherwise.

Evaluations run one at a time: the machine may have two cores, and timing runs must never overlap (a candidate
timed while another compiles would be measured on a loaded machine). Only the model calls of a best-of-k step run
in parallel -- unless each evaluation gets a device of its own (`parallel_evaluations`: best-of-k on a Ray
cluster, where each candidate is a Ray task): then the step's programs are evaluated at once and recorded in
iteration order, so the step decides exactly as it would have one by one.

Where the parts live: types.py (Attempt, LoopState, Next, the constants), steps.py (a step's agent
calls), judging.py (a program's evaluation and its record), streaming.py (agent calls in threads, tokens as events),
feedback.py (what the agents are told about earlier attempts). This module decides which step comes next.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

from ..agents.base import AnalysisAgent, GenerationAgent
from ..errors import KForgeError
from ..eval import baselines, child_setup
from ..eval.evaluator import evaluate, head_to_head, prepare
from ..eval.verdict import Verdict
from ..platform import get_platform
from ..problem import load_problem
from .config import RunConfig
from .events import (
    BestUpdated, ErrorReported, EvalStage, IterationStarted, LoopEvent, PassStarted, RunFinished, SlowerThanBaseline)
from .feedback import feedback_for, history_entry, optimization_feedback
from .head_to_head import contest_event, noisy_timings, pick_contenders, rule_text
from .standing import PROGRAM, standing
from .steps import CandidateSteps
from .types import (
    CANCELLED_ITERATION_STATUS, FUNCTIONAL, OPTIMIZATION, STATUS_RANK, STOPPED, Attempt, Cancelled, FatalEndpointError,
    LoopState, Next)

__all__ = ["Synthesis"]


class Synthesis(CandidateSteps):
    """One run of the loop. `events()` yields everything that happens; nothing here touches the run store."""

    def __init__(self, config: RunConfig, generation_agent: GenerationAgent, analysis_agent: AnalysisAgent, *,
                 state: LoopState | None = None, should_cancel: Callable[[], bool] | None = None,
                 evaluate_fn: Callable[..., Verdict] = evaluate, clock: Callable[[], float] = time.monotonic,
                 head_to_head_fn: Callable[..., dict] | None = None, parallel_evaluations: bool = False,
                 platform=None):
        """`parallel_evaluations`: `evaluate_fn` puts each evaluation on a device of its own (Ray tasks), so a
        best-of-k step evaluates its k programs at once. `platform`: the target as resolved by the caller (Ray's
        best-of-k coordinator, which holds no device: it names the device its evaluations get); default: this
        machine's, which must be available."""
        config.validate()
        self.config = config
        self.generator = generation_agent
        self.analyzer = analysis_agent
        self.state = state or LoopState()
        self._should_cancel = should_cancel or (lambda: False)
        self._evaluate = evaluate_fn
        # the real head-to-head only with the real evaluator (a test's fake verdicts have no programs to re-time)
        self._head_to_head_fn = head_to_head_fn or (head_to_head if evaluate_fn is evaluate else None)
        self._clock = clock
        self._started = clock()
        self._cancel = threading.Event()  # set on Ctrl-C / cancel so agent threads stop at their next token
        self.problem = load_problem(text=config.problem_source, name=config.problem_name)
        self.parallel_evaluations = parallel_evaluations
        # resolved once for the run
        self.platform = platform or get_platform(config.target, require_available=True)
        self.spec = self.platform.spec()
        self._open: dict[int, str] = {}  # iterations started and not finished -> pass
        self._facts: str | None = None
        self.stop_reason = ""
        self.unsupported = False  # the agent said, on the first functional step, it cannot write this problem
        self.finished = False
        self._preparing = threading.Event()  # set by _close: a baseline build started for this run stops
        self._prepare_thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------ dispatch
    def events(self) -> Iterator[LoopEvent]:
        """The run as events; always ends with one RunFinished (a bug is re-raised after it)."""
        try:
            if self._evaluate is evaluate:  # a cache location that cannot work, refused before the first generation
                child_setup.cache_dir()
            self._prepare_evaluations()
            yield from self._judge_start_program()
            nxt = Next.OPTIMIZE if self.state.best is not None else Next.RETRY
            while nxt is not Next.STOP:
                self._check_cancel()
                self._wait_for_endpoint()
                budget = self._budget_spent()
                if budget:
                    self.stop_reason = budget
                    break
                step = self._functional_step if nxt is Next.RETRY else self._optimization_step
                nxt = yield from step()
            yield from self._head_to_head()
            yield from self._close(*self._outcome())
        except (Cancelled, KeyboardInterrupt):
            self._cancel.set()
            self.stop_reason = "cancelled"
            yield from self._close("cancelled", None)
        except FatalEndpointError as e:
            self._cancel.set()
            if not e.reported:
                yield ErrorReported(message=str(e), where="loop")
            self.stop_reason = str(e)
            status = "succeeded" if self.state.best is not None else "failed"
            yield from self._close(status, None if status == "succeeded" else str(e), endpoint_failure=True)
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

    def _prepare_evaluations(self) -> None:
        """Start the evaluator's fork server, first children and the run's torch.compile baseline now, in a
        thread, so that they overlap the first generation (a model's reply takes seconds; the baseline, seconds to
        minutes on a CPU) instead of delaying the first verdict. Only with the real evaluator, on this machine
        (evaluations placed on Ray's devices start their own there); KFORGE_PREPARE=0 turns it off."""
        if self._evaluate is not evaluate or self.parallel_evaluations or \
                os.environ.get("KFORGE_PREPARE", "1").strip().lower() in ("0", "false", "no", "off"):
            return
        options = self._eval_options(FUNCTIONAL)
        stop = self._preparing

        def cancelled() -> bool:
            return stop.is_set() or self._cancel.is_set()

        self._prepare_thread = threading.Thread(
            target=prepare, args=(self.problem, self.platform.name, options, cancelled), daemon=True,
            name="kforge-prepare")
        self._prepare_thread.start()

    def _head_to_head(self) -> Iterator[LoopEvent]:
        """Best means best: the top contenders re-timed side by side in one evaluation; the fastest there wins
        (loop/head_to_head.py). A contest whose timings are noisy is re-timed once, as a verdict's are."""
        st, n = self.state, self.config.head_to_head_top
        if st.head_to_head_done or n < 2 or self._head_to_head_fn is None or st.best is None:
            return
        contenders = pick_contenders(st.correct_attempts, n)
        if len(contenders) < 2:
            return
        st.head_to_head_done = True
        rule = rule_text(len(contenders))
        yield EvalStage(iteration=None, stage=f"head to head: re-timing {len(contenders)} candidates",
                        detail={"contenders": ",".join(str(a.iteration) for a in contenders)})
        programs = {a.iteration: a.code for a in contenders}
        options = self._eval_options(OPTIMIZATION)
        result = yield from self._evaluate_live(None, programs, options, evaluate_fn=self._head_to_head_fn)
        noisy = [] if result.get("error") else noisy_timings(result)
        if noisy:
            yield EvalStage(iteration=None, stage="head to head: re-timing, noisy timing",
                            detail={"noisy": ",".join(noisy)})
            again = yield from self._evaluate_live(None, programs, options, evaluate_fn=self._head_to_head_fn)
            if again.get("error"):  # said, not hidden: a contender may have failed a check this time
                result = {**result, "warnings": [*(result.get("warnings") or []),
                                                 f"re-timing the noisy head-to-head failed ({again['error']}); these "
                                                 f"are the first one's timings"]}
            elif len(noisy_timings(again)) <= len(noisy):
                result = {**again, "warnings": [*(again.get("warnings") or []),
                                                f"re-timed: the first head-to-head's timings were noisy "
                                                f"({', '.join(noisy)}); these are from a second one"]}
        event = contest_event(result, contenders, st.best.iteration, rule)
        yield event
        if event.error:
            return
        winner = next(r for r in event.contenders if r["iteration"] == event.best_iteration)
        best = next(a for a in contenders if a.iteration == winner["iteration"])
        st.best = best
        st.best_speedups = (winner["speedup_vs_eager"], winner["speedup_vs_compiled"])
        yield BestUpdated(iteration=best.iteration, candidate_ms=winner["candidate_ms"],
                          speedup_vs_eager=winner["speedup_vs_eager"],
                          speedup_vs_compiled=winner["speedup_vs_compiled"],
                          eager_ms=(event.eager or {}).get("median_ms"),
                          compiled_ms=(event.compiled or {}).get("median_ms"))

    def _outcome(self) -> tuple[str, str | None]:
        if self.state.best is not None:
            return "succeeded", None
        if self.unsupported:
            return "unsupported", self.stop_reason
        return "failed", self.stop_reason or "no correct program was found"

    def _close(self, status: str, error: str | None, endpoint_failure: bool = False) -> Iterator[LoopEvent]:
        if self.finished:
            return
        for index, pass_name in sorted(self._open.items()):
            yield self._finished(Attempt(index, pass_name, CANCELLED_ITERATION_STATUS,
                                         f"{STOPPED} ({self.stop_reason or status})", endpoint_failure=True))
        self.finished = True
        self._preparing.set()  # a baseline still being built for this run stops (release would wait for it)
        if self._evaluate is evaluate:  # the run's warm baseline: built once per run, closed with it
            baselines.release(baselines.key_for(self.problem.source, self.config.size_class, self.platform.name,
                                                self.platform.device_name()))
        best = self.state.best
        where = standing(best.iteration, *self.state.best_speedups) if best else None
        if where is not None and where.slower_than:
            yield SlowerThanBaseline(iteration=best.iteration, speedup_vs_eager=self.state.best_speedups[0],
                                     speedup_vs_compiled=self.state.best_speedups[1], slower_than=where.slower_than,
                                     use=where.use, message=where.message)
        yield RunFinished(status=status, error=error, stop_reason=self.stop_reason,
                          best_iteration=best.iteration if best else None, endpoint_failure=endpoint_failure,
                          best_slower_than=where.slower_than if where else (), use=where.use if where else PROGRAM)

    def _wait_for_endpoint(self) -> None:
        """Sit out the wait a failed model call asked for (cancellable at every quarter second)."""
        wait, self.state.endpoint_wait_s = self.state.endpoint_wait_s, 0.0
        deadline = self._clock() + wait
        while wait > 0:
            self._cancel.wait(min(0.25, wait))
            self._check_cancel()
            wait = deadline - self._clock()

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
    def _stop_if_spent(self, pass_name: str) -> Next | None:
        """Next.STOP, with the reason, once the pass has used up its steps; None while it has some left."""
        cfg, st = self.config, self.state
        if pass_name == FUNCTIONAL and st.functional_steps >= cfg.max_functional_iters:
            self.stop_reason = f"no correct program in {cfg.max_functional_iters} functional step(s)"
        elif pass_name == OPTIMIZATION and st.optimization_steps >= cfg.max_optimization_iters:
            self.stop_reason = f"optimization budget spent ({cfg.max_optimization_iters} step(s))"
        else:
            return None
        return Next.STOP

    def _begin_step(self, pass_name: str) -> Iterator[LoopEvent]:
        """The pass announced (once a run), then one of its steps taken from its budget; returns Next.STOP (see
        `_stop_if_spent`) when none is left, None otherwise."""
        cfg, st = self.config, self.state
        if pass_name not in st.passes_started:
            st.passes_started.add(pass_name)
            limit = cfg.max_functional_iters if pass_name == FUNCTIONAL else cfg.max_optimization_iters
            yield PassStarted(pass_name=pass_name, max_iterations=limit)
        stop = self._stop_if_spent(pass_name)
        if stop is None and pass_name == FUNCTIONAL:
            st.functional_steps += 1
        elif stop is None:
            st.optimization_steps += 1
        return stop

    def _functional_step(self) -> Iterator[LoopEvent]:
        cfg, st = self.config, self.state
        stop = yield from self._begin_step(FUNCTIONAL)
        if stop:
            return stop
        indexes = yield from self._start_iterations(FUNCTIONAL)
        base = st.last if st.last is not None and st.last.code is not None else None
        feedback = feedback_for(st.last) if st.last is not None else None
        attempts = yield from self._generate_and_evaluate(FUNCTIONAL, indexes, base, feedback, [])
        judged = [a for a in attempts if not a.endpoint_failure]
        if judged:
            st.last = min(judged, key=lambda a: (STATUS_RANK.get(a.status, 9), a.iteration))
        else:
            st.functional_steps -= 1  # the endpoint failed, the model was not judged: the step is not used up
        if st.best is None and st.functional_steps == 1 and judged and all(a.unsupported for a in judged):
            self.unsupported = True
            self.stop_reason = judged[0].reason
            return Next.STOP
        refusal = self._refusal(judged)
        if st.best is None and refusal:
            self.stop_reason = refusal
            return Next.STOP
        if st.best is not None:
            if cfg.max_optimization_iters == 0:
                self.stop_reason = "a correct program was found; no optimization pass was asked for"
                return Next.STOP
            return Next.OPTIMIZE
        return self._stop_if_spent(FUNCTIONAL) or Next.RETRY

    def _optimization_step(self) -> Iterator[LoopEvent]:
        cfg, st = self.config, self.state
        stop = yield from self._begin_step(OPTIMIZATION)
        if stop:
            return stop
        best_before = st.best
        assert best_before is not None and best_before.code is not None
        indexes = yield from self._start_iterations(OPTIMIZATION)
        recommendations = yield from self._analyse(indexes[0], best_before)
        feedback = optimization_feedback(best_before, st.last_optimization, recommendations)
        attempts = yield from self._generate_and_evaluate(OPTIMIZATION, indexes, best_before, feedback,
                                                          recommendations)
        judged = [a for a in attempts if not a.endpoint_failure]
        if not judged:
            st.optimization_steps -= 1  # as in the functional step: an endpoint failure costs no step
            return Next.OPTIMIZE
        st.last_optimization = min(judged, key=lambda a: (a.candidate_ms is None, a.candidate_ms or 0.0,
                                                          STATUS_RANK.get(a.status, 9)))
        for a in judged:
            st.history.append(history_entry(a, best_before))
        refusal = self._refusal(judged)
        if refusal:
            self.stop_reason = refusal
            return Next.STOP
        improved = st.best is not best_before
        st.steps_without_improvement = 0 if improved else st.steps_without_improvement + 1
        if cfg.patience and st.steps_without_improvement >= cfg.patience and not self._keeps_trying():
            self.stop_reason = f"patience: {cfg.patience} optimization step(s) without a faster correct program"
            return Next.STOP
        return self._stop_if_spent(OPTIMIZATION) or Next.OPTIMIZE

    def _keeps_trying(self) -> bool:
        """Patience saves the budget once a program is worth having; a best slower than eager is not. A
        deterministic generator (the built-in one) then goes on until its analysis has no move left (it refuses,
        and the pass stops with that reason) or the optimization budget is spent. A model's steps cost tokens
        without such an end in sight, so its runs keep the patience they were given."""
        return bool(getattr(self.generator, "deterministic", False)) and self.state.best_slower_than_eager()

    def _refusal(self, judged: list[Attempt]) -> str:
        """Why a deterministic generator wrote no program this step ("" otherwise): asked the same again, it
        would answer the same, so the pass stops here with its one true reason instead of burning iterations."""
        if not getattr(self.generator, "deterministic", False) or not judged:
            return ""
        if any(a.status != "no_program" for a in judged):
            return ""
        return judged[0].reason

    def _start_iterations(self, pass_name: str) -> Iterator[LoopEvent]:
        indexes = list(range(self.state.next_iteration, self.state.next_iteration + self.config.best_of_k))
        self.state.next_iteration += len(indexes)
        for index in indexes:
            self._open[index] = pass_name
            yield IterationStarted(iteration=index, pass_name=pass_name)
        return indexes
