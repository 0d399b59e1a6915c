"""The agent roles' contract. The loop talks only to these types; LLM and built-in agents implement them.

The model's mistakes are data: a reply without a program is a GenerationResult with `program=None` and an `error`,
recorded and fed back; a bug in KForge raises.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol, TypeVar

from ..platform import TargetSpec

TokenSink = Callable[[str], None]


@dataclass
class Recommendation:
    title: str  # "Fuse the bias add into the GEMM epilogue"
    change: str  # what to change, concretely
    why: str  # the measured fact behind it ("aten::add is 31% of the time, a separate pass over 64 MiB")
    expected_gain: str = ""  # "~1.3x", "removes one launch"
    move: str | None = None  # built-in catalogue id ("fuse", "vectorize", "block_shape", ...) or None for LLMs
    # Whether the candidate generated from it was built with it: None when the generator does not say (an LLM is
    # handed every recommendation), False for one a rule-based generator did not build (it builds one per step).
    applied: bool | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Recommendation":
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__ if k in d})


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    model: str = ""
    estimated: bool = False
    warning: str = ""  # e.g. the server cut the prompt to its context window

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Feedback:
    """What the last evaluation said, for the next generation."""

    status: str  # verdict status, or "no_program"
    reason: str
    compile_log: str = ""
    candidate_ms: float | None = None
    eager_ms: float | None = None
    compiled_ms: float | None = None
    recommendations: list[Recommendation] = field(default_factory=list)
    history: list[str] = field(default_factory=list)  # optimization: changes tried so far and what they measured
    profile: dict | None = None  # optimization: the profile summary of the program fed back
    roofline: dict | None = None  # ... and where it stands against the device's measured ceilings


@dataclass
class GenerationRequest:
    problem_source: str
    problem_name: str
    spec: TargetSpec  # the target: name, title, candidate module and API, kernel language, single-shot example
    pass_name: str  # "functional" | "optimization"
    iteration: int
    previous_program: str | None = None
    feedback: Feedback | None = None
    reference_program: str | None = None  # a working program for another platform
    reference_target: str | None = None
    evaluation: str = ""  # how candidates are judged: the sizes evaluated, the tolerance, the device


@dataclass
class GenerationResult:
    program: str | None
    reply_text: str = ""
    error: str | None = None  # why there is no program (no code block, truncated reply, unsupported module...)
    notes: str = ""  # shown to the user, e.g. "synthesized 5 of 6 graph nodes (83%)"
    usage: Usage = field(default_factory=Usage)
    prompt: list[dict] = field(default_factory=list)  # the messages sent, for the record
    thinking: str = ""  # the model's reasoning (reasoning_content, or <think> blocks moved out of the reply)
    alternatives: list[str] = field(default_factory=list)  # other programs in the reply, to try when `program`
    # does not compile (in that order; see extract.Extraction.alternatives)
    # The catalogue moves this candidate was built with (None: not stated; every recommendation counts as tried).
    moves: list[str] | None = None
    # The agent cannot write this problem at all (no program, and asking again cannot change that): the run ends
    # `unsupported` with `error` as the reason, instead of spending its functional steps. Rule-based agents only.
    unsupported: bool = False
    # What the agent covers of this problem, in words ("3 of 4 nodes synthesized ...; kept in PyTorch: argmax"):
    # recorded with the iteration and reported per problem by `bench`. Empty: the agent does not say.
    coverage: str = ""


@dataclass
class AnalysisRequest:
    program: str
    problem_source: str
    spec: TargetSpec
    profile: dict | None  # kforge_core.profiling summary
    roofline: dict | None
    candidate_ms: float | None
    eager_ms: float | None
    compiled_ms: float | None
    screenshots: list[bytes] = field(default_factory=list)  # PNG/JPEG of GUI profilers
    history: list[dict] = field(default_factory=list)  # earlier moves tried and their measured effect
    evaluation: str = ""  # the sizes evaluated, the tolerance, the device (as in GenerationRequest)
    screenshots_note: str = ""  # what the screenshots show, when that is not the program above
    iteration: int | None = None  # the iteration whose program this is (history entries name what they built on)


@dataclass
class AnalysisResult:
    recommendations: list[Recommendation]
    text: str = ""
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    notes: str = ""  # shown to the user, e.g. "the model rejected the screenshots; analysed without them"


# A TokenSink may also have `thinking(text)` (reasoning streamed apart from the answer) and `retrying(event)`
# (an `llm.RetryEvent`: the call failed and will be sent again); LLM agents use them when present.


class GenerationAgent(Protocol):
    label: str  # shown everywhere: "gpt-4o @ http://127.0.0.1:8000/v1" or "built-in, rule-based (no LLM)"
    # Optional `deterministic: bool` (read with getattr, default False): the same request always gives the same
    # result, so a request it answered without a program is not asked again (the loop stops with its reason).

    def generate(self, request: GenerationRequest, on_token: TokenSink | None = None) -> GenerationResult: ...


class AnalysisAgent(Protocol):
    label: str
    # whether its analysis reads the vendor profiler's metrics (Nsight Compute's, `profile["ncu"]`): the evaluations
    # of a run run that profiler only for an agent that reads them (it costs about 10 s an evaluation)
    reads_device_profiler: bool

    def analyze(self, request: AnalysisRequest, on_token: TokenSink | None = None) -> AnalysisResult: ...


R = TypeVar("R", GenerationResult, AnalysisResult)


def rule_based_answer(work: Callable[[], R], text: Callable[[R], str], model: str,
                      on_token: TokenSink | None) -> R:
    """A rule-based agent's call: `work()` timed as the call's latency (no tokens to account), and its whole
    `text(result)` handed to `on_token` at once (nothing streams)."""
    t0 = time.perf_counter()
    result = work()
    result.usage = Usage(latency_s=time.perf_counter() - t0, model=model)
    if on_token and text(result):
        on_token(text(result))
    return result
