"""The loop's vocabulary: pass names, the step outcomes (`Next`), its exceptions, one candidate's outcome
(`Attempt`) and where a run stands between steps (`LoopState`). Shared by the engine, its steps and the resume
code; nothing here runs anything."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..agents.base import Recommendation
from ..errors import KForgeError
from ..llm import LLMAuthError, LLMConfigError, LLMContextError, LLMRequestError
from ..store import ITERATION_STATUSES
from ..eval.verdict import Verdict

FUNCTIONAL, OPTIMIZATION = "functional", "optimization"
START = "start"  # a run's starting program (RunConfig.start_program), judged before the passes
# The store has no "cancelled" iteration status yet; until it does, an iteration cut short without a verdict is
# recorded as "no_program" with a reason that says it was cancelled.
CANCELLED_ITERATION_STATUS = "cancelled" if "cancelled" in ITERATION_STATUSES else "no_program"
# Endpoint refusals that a retry cannot fix: the run stops instead of burning iterations on them. A prompt too long
# for the context is not one of them (the next prompt is clipped to the window the refusal taught).
FATAL_LLM_ERRORS = (LLMAuthError, LLMConfigError, LLMRequestError)
NOT_FATAL_LLM_ERRORS = (LLMContextError,)
# How promising a failed attempt is, to pick which of a best-of-k step the next step builds on.
STATUS_RANK = {"correct": 0, "incorrect": 1, "runtime_error": 2, "timeout": 3, "compile_error": 4, "rejected": 5,
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
    """The model endpoint refused in a way retrying cannot fix, or failed too often in a row (or asked for a longer
    wait than the run may take). `reported`: the failure was already yielded as an `error` event."""

    def __init__(self, message: str, *, reported: bool = False):
        self.reported = reported
        super().__init__(message)


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
    unsupported: bool = False  # no program because the agent cannot write this problem (GenerationResult.unsupported)

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
    endpoint_wait_s: float = 0.0  # how long the loop waits before its next step (after a failed model call)
    correct_attempts: list[Attempt] = field(default_factory=list)  # the contenders of the final head-to-head
    head_to_head_done: bool = False
    # the best's speedups vs eager and torch.compile as last announced (its own verdict's, or the head-to-head's)
    best_speedups: tuple[float | None, float | None] = (None, None)

    def best_slower_than_eager(self) -> bool:
        eager = self.best_speedups[0]
        return self.best is not None and eager is not None and eager < 1.0


def is_faster(attempt: Attempt, best: Attempt | None) -> bool:
    """Whether `attempt` should replace `best` (any attempt beats none; an untimed one beats no timed best).

    Two programs are compared by their speedups over eager PyTorch when both have one: each is measured in trials
    interleaved with eager on the same machine at the same moment, so a load change between two evaluations (on a
    shared 2-core box, 2-5x) cancels out, where comparing raw milliseconds from different minutes would not."""
    if best is None:
        return True
    if attempt.candidate_ms is None:
        return False
    if best.candidate_ms is None:
        return True
    ours, theirs = _speedup(attempt), _speedup(best)
    if ours is not None and theirs is not None:
        return ours > theirs
    return attempt.candidate_ms < best.candidate_ms


def _speedup(attempt: Attempt) -> float | None:
    return attempt.verdict.speedup_vs_eager if attempt.verdict is not None else None
