"""Judging programs: each evaluated (live, its stages streamed as events; cancellable), the events that report its
verdict, the iteration finished and the best updated. A run's starting program (`RunConfig.start_program`) and a
manual run's versions are judged here the same way as the agents' programs.

`Judging` is the part of `Synthesis` (engine.py) that turns a program into a verdict and events; `CandidateSteps`
(steps.py) builds on it with the agent calls.
"""

from __future__ import annotations

import inspect
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

from ..agents.base import GenerationResult, Recommendation
from ..eval.evaluator import EvalOptions, EvaluationCancelled
from ..eval.verdict import Verdict, noisy_timings
from .config import RunConfig
from .events import (
    BestUpdated, CompileLog, Diff, EvalStage, IterationFinished, IterationStarted, LoopEvent, ProfileReady,
    ProgramExtracted, ProgramMissing, Timings, VerdictReady)
from .records import applied_recommendations, excerpt, unified_diff
from .streaming import EvaluationAhead
from .types import OPTIMIZATION, START, Attempt, Cancelled, LoopState, is_faster


class Judging:
    """Evaluation and its record, for `Synthesis`, which sets these attributes."""

    config: RunConfig
    state: LoopState
    problem: Any
    platform: Any
    _evaluate: Callable[..., Verdict]
    _cancel: threading.Event
    _open: dict[int, str]  # iterations started and not finished -> pass
    _check_cancel: Callable[[], None]  # raises Cancelled once the run is asked to stop
    _should_cancel: Callable[[], bool]

    # ------------------------------------------------------------------------------------------ start program
    def _judge_start_program(self) -> Iterator[LoopEvent]:
        """A run given a starting program (`RunConfig.start_program`) judges it first, as iteration 0 of a "start"
        pass: correct, it is the best the optimization pass starts from; not, it is the program the functional
        pass fixes (with its verdict fed back). Once judged, a resume does not judge it again."""
        code = self.config.start_program
        if not code or self.state.next_iteration != 0:
            return
        self.state.next_iteration = 1
        self.state.last = yield from self._judge_given(0, START, code, "the starting program (written by a person)",
                                                       None)

    def _judge_given(self, index: int, pass_name: str, code: str, notes: str,
                     base: Attempt | None) -> Iterator[LoopEvent]:
        """A program a person wrote (the start program, a manual run's version), judged as iteration `index` of
        `pass_name`; returns its Attempt."""
        self._open[index] = pass_name
        yield IterationStarted(iteration=index, pass_name=pass_name)
        result = GenerationResult(program=code, notes=notes)
        return (yield from self._judge(index, pass_name, result, base, []))

    # ------------------------------------------------------------------------------------------ a program judged
    def _judge(self, i: int, pass_name: str, result: GenerationResult, base: Attempt | None,
               recommendations: list[Recommendation],
               ahead: EvaluationAhead | None = None) -> Iterator[LoopEvent]:
        recommendations = applied_recommendations(recommendations, result.moves)
        recs = [r.to_dict() for r in recommendations] or None
        if result.program is None:
            error = result.error or "the reply held no program"
            yield ProgramMissing(iteration=i, error=error, reply_excerpt=excerpt(result.reply_text),
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
                why = noisy_timings(verdict)  # the first one's numbers, kept: how noisy, not only which
                again.warnings.append(f"re-timed: the first evaluation's timings were noisy "
                                      f"({'; '.join(f'{k}: {v}' for k, v in why.items()) or ', '.join(verdict.noisy)})"
                                      f"; these are from a second one")
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
                           device_profiler=bool(getattr(getattr(self, "analyzer", None), "reads_device_profiler",
                                                        True)),
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


def _accepts(fn, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
