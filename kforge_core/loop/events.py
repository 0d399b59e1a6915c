"""The loop's typed events. The CLI, the worker (which writes them to the run store) and the tests consume the same
stream. Each event has a stable `kind` and a JSON-safe `data()` payload; the payload shapes are a stored contract
(the UI has one renderer per kind), so add keys, never rename them.

Kinds the loop appends with `RunStore.append_event` (payload = `data()`):

    pass_started       {pass, max_iterations}
    prompt_sent        {iteration, agent: "generation"|"analysis", model, messages}   (image data replaced by a note)
    tokens             {text, agent[, thinking: true]}  (batched by the store's TokenBuffer, per iteration, agent and
                                                        channel; `thinking`: the model's reasoning, not its answer)
    retry              {iteration, agent, attempt, delay_s, error, where: "client"|"loop"}   (an endpoint failure
                        about to be retried: by the client after `delay_s`, or by the loop before its next step)
    program_extracted  {iteration, code, language, notes}
    program_missing    {iteration, error, reply_excerpt}
    diff               {iteration, against_iteration, unified_diff}
    compile_log        {iteration, log}
    verdict            {iteration, verdict: Verdict.to_dict()}
    timings            {iteration, candidate_ms, eager_ms, compiled_ms, speedup_vs_eager, speedup_vs_compiled,
                        torch_compile_s, candidate/eager/compiled: {median_ms, min_ms, max_ms, trials},
                        baseline_shared, noisy: [timing names beyond the noise bound]}
    profile            {iteration, profile, roofline}
    recommendations    {iteration, recommendations: [Recommendation.to_dict()], text, agent_label, analyzed_iteration,
                        notes}
    error              {message, where}
    eval_stage         {iteration, stage, ...}          (the evaluation's progress: "checking seed 2/5", "timing")
    head_to_head       {contenders: [{iteration, candidate_ms (the median), min_ms, max_ms, trials, speedup_vs_eager,
                        speedup_vs_compiled, judged, checks: [{name, passed, detail}], warnings, noisy}], eager,
                        compiled, best_iteration, rule, error, warnings (the contest's: its setup, the baselines'
                        noise, a re-time), judged (out of process), noise_bounds {median_over_min, max_over_median}}
                        (see loop/head_to_head.py; `judged`, `checks`, `warnings`, `noisy` and `noise_bounds` are
                        absent from runs recorded before they were added)
    slower_than_baseline {iteration, speedup_vs_eager, speedup_vs_compiled, slower_than: ["eager", "torch.compile"],
                        use: "eager"|"torch.compile", message}   (the run's best loses to a measured baseline; see
                        loop/standing.py for the policy)

Kinds the store writes itself, through the method named (the loop yields them as events all the same, so that
every consumer sees one stream):

    iteration_started  -> start_iteration     (no event row: the row itself records it)
    iteration_finished -> finish_iteration    {index, pass, status, reason, candidate_ms, speedup_vs_eager, ...}
    best_updated       -> set_best            {iteration, speedup_vs_eager, speedup_vs_compiled, candidate_ms}
    usage              -> add_usage           {prompt_tokens, completion_tokens, agent, model, latency_s, estimated,
                                               failed, warning, cost}   (failed: a call that broke, estimated)
    run_finished       -> finish_run          {status, error, stop_reason, best_iteration, best_speedup_vs_*,
                                               best_slower_than: [...], use: "program"|"eager"|"torch.compile"}

Iteration indexes are 0-based and global across both passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..agents.base import Recommendation


@dataclass(frozen=True)
class LoopEvent:
    kind: ClassVar[str] = ""
    stored_by_store: ClassVar[bool] = False  # True: written through a RunStore method, not append_event

    @property
    def iteration_index(self) -> int | None:
        return getattr(self, "iteration", None)

    def data(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class PassStarted(LoopEvent):
    kind: ClassVar[str] = "pass_started"
    pass_name: str
    max_iterations: int

    def data(self) -> dict:
        return {"pass": self.pass_name, "max_iterations": self.max_iterations}


@dataclass(frozen=True)
class IterationStarted(LoopEvent):
    kind: ClassVar[str] = "iteration_started"
    stored_by_store: ClassVar[bool] = True
    iteration: int
    pass_name: str

    def data(self) -> dict:
        return {"iteration": self.iteration, "pass": self.pass_name}


@dataclass(frozen=True)
class PromptSent(LoopEvent):
    kind: ClassVar[str] = "prompt_sent"
    iteration: int
    agent: str  # "generation" | "analysis"
    model: str
    messages: list

    def data(self) -> dict:
        return {"iteration": self.iteration, "agent": self.agent, "model": self.model, "messages": self.messages}


@dataclass(frozen=True)
class Tokens(LoopEvent):
    kind: ClassVar[str] = "tokens"
    iteration: int
    agent: str
    text: str
    thinking: bool = False  # the model's reasoning (reasoning_content, <think>), shown apart from the answer

    def data(self) -> dict:
        return {"text": self.text, "agent": self.agent, **({"thinking": True} if self.thinking else {})}


@dataclass(frozen=True)
class Retrying(LoopEvent):
    kind: ClassVar[str] = "retry"
    iteration: int | None
    agent: str
    attempt: int  # the failed attempt's number (client) or the endpoint failures in a row (loop)
    delay_s: float
    error: str
    where: str = "client"  # "client": the same call is sent again; "loop": the next step waits, then goes on

    def data(self) -> dict:
        return {"iteration": self.iteration, "agent": self.agent, "attempt": self.attempt, "delay_s": self.delay_s,
                "error": self.error, "where": self.where}


@dataclass(frozen=True)
class ProgramExtracted(LoopEvent):
    kind: ClassVar[str] = "program_extracted"
    iteration: int
    code: str
    language: str = "python"
    notes: str = ""
    coverage: str = ""  # GenerationResult.coverage: what the agent covers of the problem

    def data(self) -> dict:
        return {"iteration": self.iteration, "code": self.code, "language": self.language, "notes": self.notes,
                "coverage": self.coverage}


@dataclass(frozen=True)
class ProgramMissing(LoopEvent):
    kind: ClassVar[str] = "program_missing"
    iteration: int
    error: str
    reply_excerpt: str = ""
    coverage: str = ""  # GenerationResult.coverage
    unsupported: bool = False  # GenerationResult.unsupported: the run ends `unsupported`

    def data(self) -> dict:
        return {"iteration": self.iteration, "error": self.error, "reply_excerpt": self.reply_excerpt,
                "coverage": self.coverage, "unsupported": self.unsupported}


@dataclass(frozen=True)
class Diff(LoopEvent):
    kind: ClassVar[str] = "diff"
    iteration: int
    against_iteration: int
    unified_diff: str

    def data(self) -> dict:
        return {"iteration": self.iteration, "against_iteration": self.against_iteration,
                "unified_diff": self.unified_diff}


@dataclass(frozen=True)
class CompileLog(LoopEvent):
    kind: ClassVar[str] = "compile_log"
    iteration: int
    log: str

    def data(self) -> dict:
        return {"iteration": self.iteration, "log": self.log}


@dataclass(frozen=True)
class VerdictReady(LoopEvent):
    kind: ClassVar[str] = "verdict"
    iteration: int
    verdict: dict  # Verdict.to_dict()

    def data(self) -> dict:
        return {"iteration": self.iteration, "verdict": self.verdict}


@dataclass(frozen=True)
class Timings(LoopEvent):
    kind: ClassVar[str] = "timings"
    iteration: int
    candidate_ms: float | None
    eager_ms: float | None
    compiled_ms: float | None
    speedup_vs_eager: float | None
    speedup_vs_compiled: float | None
    torch_compile_s: float | None
    # each timing's {median_ms, min_ms, max_ms, trials}: the spread belongs to the number
    candidate: dict | None = None
    eager: dict | None = None
    compiled: dict | None = None
    baseline_shared: bool = False  # the torch.compile baseline was built once for the run and kept warm
    noisy: tuple = ()

    def data(self) -> dict:
        return {"iteration": self.iteration, "candidate_ms": self.candidate_ms, "eager_ms": self.eager_ms,
                "compiled_ms": self.compiled_ms, "speedup_vs_eager": self.speedup_vs_eager,
                "speedup_vs_compiled": self.speedup_vs_compiled, "torch_compile_s": self.torch_compile_s,
                "candidate": self.candidate, "eager": self.eager, "compiled": self.compiled,
                "baseline_shared": self.baseline_shared, "noisy": list(self.noisy)}


@dataclass(frozen=True)
class ProfileReady(LoopEvent):
    kind: ClassVar[str] = "profile"
    iteration: int
    profile: dict | None
    roofline: dict | None

    def data(self) -> dict:
        return {"iteration": self.iteration, "profile": self.profile, "roofline": self.roofline}


@dataclass(frozen=True)
class RecommendationsReady(LoopEvent):
    kind: ClassVar[str] = "recommendations"
    iteration: int  # the first iteration generated from them
    recommendations: list[Recommendation]
    text: str
    agent_label: str
    analyzed_iteration: int | None = None  # the (best) iteration whose measurements were analysed
    notes: str = ""

    def data(self) -> dict:
        return {"iteration": self.iteration, "recommendations": [r.to_dict() for r in self.recommendations],
                "text": self.text, "agent_label": self.agent_label, "analyzed_iteration": self.analyzed_iteration,
                "notes": self.notes}


@dataclass(frozen=True)
class EvalStage(LoopEvent):
    kind: ClassVar[str] = "eval_stage"
    iteration: int | None
    stage: str
    detail: dict

    def data(self) -> dict:
        return {**self.detail, "iteration": self.iteration, "stage": self.stage}


@dataclass(frozen=True)
class HeadToHead(LoopEvent):
    kind: ClassVar[str] = "head_to_head"
    contenders: list
    eager: dict | None
    compiled: dict | None
    best_iteration: int | None
    rule: str
    error: str | None = None
    warnings: tuple = ()
    judged: bool | None = None  # None: not known (an evaluator that does not say)
    noise_bounds: dict | None = None

    def data(self) -> dict:
        return {"contenders": self.contenders, "eager": self.eager, "compiled": self.compiled,
                "best_iteration": self.best_iteration, "rule": self.rule, "error": self.error,
                "warnings": list(self.warnings), "judged": self.judged, "noise_bounds": self.noise_bounds}


@dataclass(frozen=True)
class SlowerThanBaseline(LoopEvent):
    """The run's best correct program is slower than eager PyTorch (or torch.compile, when timed): said once, at
    the run's end, so that no view can show the result as a gain."""

    kind: ClassVar[str] = "slower_than_baseline"
    iteration: int
    speedup_vs_eager: float | None
    speedup_vs_compiled: float | None
    slower_than: tuple
    use: str
    message: str

    def data(self) -> dict:
        return {"iteration": self.iteration, "speedup_vs_eager": self.speedup_vs_eager,
                "speedup_vs_compiled": self.speedup_vs_compiled, "slower_than": list(self.slower_than),
                "use": self.use, "message": self.message}


@dataclass(frozen=True)
class ErrorReported(LoopEvent):
    kind: ClassVar[str] = "error"
    message: str
    where: str
    iteration: int | None = None

    def data(self) -> dict:
        return {"message": self.message, "where": self.where}


@dataclass(frozen=True)
class UsageRecorded(LoopEvent):
    kind: ClassVar[str] = "usage"
    stored_by_store: ClassVar[bool] = True
    iteration: int | None
    agent: str
    prompt_tokens: int
    completion_tokens: int
    model: str = ""
    latency_s: float = 0.0
    estimated: bool = False
    failed: bool = False  # the call broke (a cut stream): what it cost before it did, estimated
    warning: str = ""
    cost: float | None = None  # at the agent's price per million tokens, when one is set

    def data(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "agent": self.agent, "model": self.model, "latency_s": self.latency_s, "estimated": self.estimated,
                "failed": self.failed, "warning": self.warning, "cost": self.cost}


@dataclass(frozen=True)
class IterationFinished(LoopEvent):
    kind: ClassVar[str] = "iteration_finished"
    stored_by_store: ClassVar[bool] = True
    iteration: int
    pass_name: str
    status: str  # a verdict status, or "no_program"
    reason: str
    code: str | None = None
    candidate_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compiled: float | None = None
    verdict: dict | None = None
    profile: dict | None = None
    recommendations: list[dict] | None = None

    def data(self) -> dict:
        return {"index": self.iteration, "pass": self.pass_name, "status": self.status, "reason": self.reason,
                "candidate_ms": self.candidate_ms, "speedup_vs_eager": self.speedup_vs_eager,
                "speedup_vs_compiled": self.speedup_vs_compiled}


@dataclass(frozen=True)
class BestUpdated(LoopEvent):
    kind: ClassVar[str] = "best_updated"
    stored_by_store: ClassVar[bool] = True
    iteration: int
    candidate_ms: float | None
    speedup_vs_eager: float | None
    speedup_vs_compiled: float | None
    eager_ms: float | None = None
    compiled_ms: float | None = None

    def data(self) -> dict:
        return {"iteration": self.iteration, "speedup_vs_eager": self.speedup_vs_eager,
                "speedup_vs_compiled": self.speedup_vs_compiled, "candidate_ms": self.candidate_ms}


@dataclass(frozen=True)
class RunFinished(LoopEvent):
    kind: ClassVar[str] = "run_finished"
    stored_by_store: ClassVar[bool] = True
    status: str  # "succeeded" | "failed" | "unsupported" | "cancelled"
    error: str | None = None
    stop_reason: str = ""  # why the loop stopped, in words ("patience: 3 steps without a faster program")
    best_iteration: int | None = None
    endpoint_failure: bool = False  # the model endpoint stopped the run (refusal, or failing too long)
    best_slower_than: tuple = ()  # the measured baselines the best program is slower than (loop/standing.py)
    use: str = "program"  # what to use: the program, or the faster baseline ("eager", "torch.compile")

    def data(self) -> dict:
        return {"status": self.status, "error": self.error, "stop_reason": self.stop_reason,
                "best_iteration": self.best_iteration, "endpoint_failure": self.endpoint_failure,
                "best_slower_than": list(self.best_slower_than), "use": self.use}


ALL_EVENTS: tuple[type[LoopEvent], ...] = (
    PassStarted, IterationStarted, PromptSent, Tokens, ProgramExtracted, ProgramMissing, Diff, CompileLog,
    VerdictReady, Timings, ProfileReady, RecommendationsReady, ErrorReported, UsageRecorded, IterationFinished,
    BestUpdated, RunFinished, Retrying, EvalStage, HeadToHead, SlowerThanBaseline,
)
