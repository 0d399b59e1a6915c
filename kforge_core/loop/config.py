"""`RunConfig`: everything one synthesis run needs, with units in the names. Stored with the run minus secrets.

The API key never reaches the run store, its events or a worker's command line: `to_record()` drops it, and a
worker process gets it through its environment (`OPENAI_API_KEY`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agents.factory import AGENT_KINDS
from ..errors import UsageError

SECRET_FIELDS = ("api_key",)
# Stored in their own run columns (problem_source, reference_program), so not repeated in the config JSON.
COLUMN_FIELDS = ("problem_source", "reference_program")  # start_program stays in the config: it is an input


@dataclass
class RunConfig:
    problem_source: str  # the KernelBench-format problem (Model, get_inputs, get_init_inputs)
    problem_name: str
    target: str  # platform name, e.g. "cpu"
    agent: str = "llm"  # "llm" | "builtin"
    model: str | None = None  # generation model (None: env / settings file)
    analysis_model: str | None = None  # performance-analysis model (None: same as `model`)
    base_url: str | None = None  # OpenAI-compatible API root (None: env / settings file / OpenAI)
    api_key: str | None = None  # secret: never stored in the DB or events
    max_functional_iters: int = 5  # functional-pass steps before giving up on correctness
    max_optimization_iters: int = 5  # optimization-pass steps once a correct program exists
    max_wall_s: float | None = None  # wall-clock budget of the whole run, seconds (checked between steps)
    max_total_tokens: int | None = None  # prompt + completion tokens over all model calls (checked between steps)
    patience: int = 3  # stop after this many optimization steps without a faster one (see Synthesis._keeps_trying)
    best_of_k: int = 1  # candidates generated per step (in parallel); each is its own iteration
    reference_program: str | None = None  # a working program for another target (the paper's strongest aid)
    reference_target: str | None = None  # which target `reference_program` is for
    # a program to start from (written in the Workbench): judged first; when correct the optimization pass starts
    # from it, when not the functional pass fixes it
    start_program: str | None = None
    screenshots: list[str] = field(default_factory=list)  # PNG/JPEG profiler screenshots for the analysis agent
    screenshots_of: int | None = None  # the iteration whose program they show; None: taken before the run
    tolerance: str = "default"  # kforge_core.eval.tolerance policy name
    size_class: str | None = None  # "cpu" / "gpu": a gallery problem's size class; None keeps the file's sizes
    eval_timeout_s: float = 300.0  # wall-clock limit of one evaluation (build, checks, timing), seconds
    eval_timing_options: dict = field(default_factory=dict)  # EvalOptions.timing_options (min_trials, budget_s...)
    eval_baselines: bool = True  # time torch.compile next to each correct candidate (its build shared per run)
    # before the run ends, the top N correct candidates (by speedup vs eager) are re-timed head to head in one
    # evaluation and the fastest there is the best; 0 or 1 turns it off
    head_to_head_top: int = 3
    llm_options: dict = field(default_factory=dict)  # extra LLMConfig fields: timeout_s, max_retries, max_tokens...
    # After a model call failed (the client's own retries spent), the loop waits before its next step: this many
    # seconds, doubling per failure in a row, or what a 429's Retry-After asks for up to endpoint_max_wait_s (a
    # longer wait stops the run: resume it later). max_endpoint_failures in a row stop the run the same way.
    endpoint_backoff_s: float = 10.0
    endpoint_max_wait_s: float = 600.0
    max_endpoint_failures: int = 5

    def __post_init__(self) -> None:
        self.screenshots = [str(p) for p in (self.screenshots or [])]
        self.eval_timing_options = dict(self.eval_timing_options or {})
        self.llm_options = dict(self.llm_options or {})

    def validate(self) -> None:
        """Raise UsageError for values no run can start with (checked before a run is created)."""
        from ..llm.config import LLMConfig
        from ..eval.tolerance import get_policy

        problems = []
        if self.agent not in AGENT_KINDS:
            problems.append(f"agent must be one of {', '.join(AGENT_KINDS)} (got {self.agent!r})")
        for name in ("max_functional_iters", "max_optimization_iters", "patience"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if self.max_functional_iters < 1:
            problems.append("max_functional_iters must be at least 1")
        if self.best_of_k < 1:
            problems.append("best_of_k must be at least 1")
        if self.max_wall_s is not None and self.max_wall_s <= 0:
            problems.append("max_wall_s must be > 0")
        if self.max_total_tokens is not None and self.max_total_tokens <= 0:
            problems.append("max_total_tokens must be > 0")
        if self.endpoint_backoff_s < 0 or self.endpoint_max_wait_s < 0:
            problems.append("endpoint_backoff_s and endpoint_max_wait_s must be >= 0")
        if self.max_endpoint_failures < 1:
            problems.append("max_endpoint_failures must be at least 1")
        if not 0 <= self.head_to_head_top <= 8:
            problems.append("head_to_head_top must be between 0 and 8")
        if self.eval_timeout_s <= 0:
            problems.append("eval_timeout_s must be > 0")
        if bool(self.reference_program) != bool(self.reference_target):
            problems.append("a reference program needs its target, and a reference target needs its program")
        unknown = set(self.llm_options) - {f.name for f in dataclasses.fields(LLMConfig)}
        if unknown or set(self.llm_options) & {"api_key", "sources"}:
            problems.append(f"llm_options may only hold LLMConfig settings (not {', '.join(sorted(unknown))})")
        for path in self.screenshots:
            problems.extend(_screenshot_problem(path))
        if problems:
            raise UsageError("invalid run configuration: " + "; ".join(problems))
        get_policy(self.tolerance)

    def to_record(self) -> dict[str, Any]:
        """The config as stored with the run: no secrets, no large texts that have their own columns."""
        from ..llm.errors import redact_url

        record = {k: v for k, v in dataclasses.asdict(self).items() if k not in SECRET_FIELDS + COLUMN_FIELDS}
        if self.base_url:
            record["base_url"] = redact_url(self.base_url)  # user:password@ or ?key= must not reach the DB
        return record

    @classmethod
    def from_run(cls, run: dict[str, Any], **overrides: Any) -> RunConfig:
        """Rebuild from a stored run (`RunStore.get_run`); `overrides` (e.g. api_key, more iterations) win."""
        stored = dict(run.get("config") or {})
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in stored.items() if k in known}
        values.update(problem_source=run["problem_source"], problem_name=run["problem_name"], target=run["target"],
                      agent=run.get("agent") or values.get("agent", "llm"),
                      reference_program=run.get("reference_program"), reference_target=run.get("reference_target"))
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if "llm_options" in overrides:  # a flag adds to the stored options (one of them), it does not replace them
            overrides["llm_options"] = {**(values.get("llm_options") or {}), **overrides["llm_options"]}
        values.update(overrides)
        return cls(**values)


def _screenshot_problem(path: str) -> list[str]:
    from ..llm.images import sniff_image_type

    p = Path(path).expanduser()
    try:
        head = p.read_bytes()[:16]
    except OSError as e:
        return [f"cannot read screenshot {path}: {e.strerror or e}"]
    if sniff_image_type(head) is None:
        return [f"screenshot {path} is not a PNG or JPEG image"]
    return []
