"""The evaluator's result: a JSON-safe dataclass, the same shape whether it came from a verdict or a crash."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("correct", "incorrect", "compile_error", "runtime_error", "timeout", "rejected")


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    trials: int


@dataclass
class Verdict:
    status: str
    reason: str
    target: str
    tolerance: dict | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    candidate: Timing | None = None
    eager: Timing | None = None
    compiled: Timing | None = None
    torch_compile_s: float | None = None  # time torch.compile took for the baseline, reported separately
    checks: list[dict] = field(default_factory=list)  # [{"name", "passed", "detail"}]
    warnings: list[str] = field(default_factory=list)
    compile_log: str = ""
    build_s: float | None = None  # time spent building the candidate's kernels (0 when all came from cache)
    # one record per kernel build: {"platform", "key", "cached", "compiler_ran", "seconds"}
    builds: list[dict] = field(default_factory=list)
    kernel_launches: dict[str, int] = field(default_factory=dict)  # totals over the checked calls below
    kernel_launch_calls: int = 0  # how many checked forward calls `kernel_launches` counts (0: not recorded)
    profile: dict | None = None
    roofline: dict | None = None
    # share of the forward's time spent in the candidate's own compiled kernels (the lowest of the measurements in
    # custom_share_detail), and ATen compute of the reference's kind its forward ran itself (harness/work.py)
    custom_share: float | None = None
    custom_share_detail: dict | None = None
    aten_compute: list[str] = field(default_factory=list)
    device: str = ""
    log_tail: str = ""  # what the candidate printed (stdout/stderr), last lines
    wall_s: float | None = None
    # where the torch.compile baseline was timed: {"compiled": "shared", "built_at", "key"} when the run's warm
    # baseline server timed it (built once per run), None when this evaluation's child compiled its own
    baseline: dict | None = None
    noisy: list[str] = field(default_factory=list)  # timings whose trials disagree beyond the bounds below
    # the evaluation's memory (harness/footprint.py): the problem's own tensor sizes, the bound the evaluation needs
    # and each phase's measured peak
    memory: dict | None = None
    # verdict fields whose values are claims of the candidate's process (judged evaluations: launch counts, time in
    # its kernels, output provenance, ATen ops, build records, profile): shown as such; none of them makes a verdict
    # correct or a time shorter (docs/EVALUATOR.md, "What the judge takes from the candidate's process")
    reported_by_candidate: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown verdict status {self.status!r}")

    @property
    def candidate_ms(self) -> float | None:
        return self.candidate.median_ms if self.candidate else None

    @property
    def eager_ms(self) -> float | None:
        return self.eager.median_ms if self.eager else None

    @property
    def compiled_ms(self) -> float | None:
        return self.compiled.median_ms if self.compiled else None

    @property
    def speedup_vs_eager(self) -> float | None:
        return _ratio(self.eager_ms, self.candidate_ms)

    @property
    def speedup_vs_compiled(self) -> float | None:
        return _ratio(self.compiled_ms, self.candidate_ms)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(candidate_ms=self.candidate_ms, eager_ms=self.eager_ms, compiled_ms=self.compiled_ms,
                 speedup_vs_eager=self.speedup_vs_eager, speedup_vs_compiled=self.speedup_vs_compiled)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Verdict":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        for key in ("candidate", "eager", "compiled"):
            if isinstance(known.get(key), dict):
                known[key] = Timing(**known[key])
        return cls(**known)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


# A timing is noisy when its median is more than NOISE_MEDIAN_OVER_MIN x its fastest trial, or its slowest trial
# more than NOISE_MAX_OVER_MEDIAN x its median: something else ran during the trials, and the median may be off.
NOISE_MEDIAN_OVER_MIN = 1.3
NOISE_MAX_OVER_MEDIAN = 3.0


NOISE_BOUNDS = {"median_over_min": NOISE_MEDIAN_OVER_MIN, "max_over_median": NOISE_MAX_OVER_MEDIAN}


def timing_noise(t: Timing) -> str:
    """Why a timing's trials disagree beyond the stated bounds, or "" when they agree."""
    if t.min_ms <= 0:
        return ""
    if t.median_ms > NOISE_MEDIAN_OVER_MIN * t.min_ms:
        return f"median {t.median_ms:.3g} ms is {t.median_ms / t.min_ms:.1f}x its fastest trial " \
               f"({t.min_ms:.3g} ms; bound {NOISE_MEDIAN_OVER_MIN:g}x)"
    if t.max_ms > NOISE_MAX_OVER_MEDIAN * t.median_ms:
        return f"slowest trial {t.max_ms:.3g} ms is {t.max_ms / t.median_ms:.1f}x the median " \
               f"({t.median_ms:.3g} ms; bound {NOISE_MAX_OVER_MEDIAN:g}x)"
    return ""


def noise_warning(name: str, t: Timing) -> str:
    """The warning a noisy timing carries (a verdict's, a head-to-head's), or "" when its trials agree."""
    why = timing_noise(t)
    return (f"noisy timing ({name}, {why} over {t.trials} trials): the machine was busy or the timing unstable; "
            f"re-time before trusting this number") if why else ""


def noisy_timings(verdict: Verdict) -> dict[str, str]:
    """{timing name: why} for the verdict's timings whose trials disagree beyond the stated bounds."""
    out = {}
    for name in ("candidate", "eager", "compiled"):
        t = getattr(verdict, name)
        why = timing_noise(t) if t is not None else ""
        if why:
            out[name] = why
    return out


def mark_noise(verdict: Verdict) -> None:
    """Record noisy timings on the verdict (`noisy`) and as warnings."""
    noisy = noisy_timings(verdict)
    verdict.noisy = sorted(noisy)
    for name in noisy:
        verdict.warnings.append(noise_warning(name, getattr(verdict, name)))
