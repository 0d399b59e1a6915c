"""Where a run's best program stands against the baselines it was timed with, and what to use instead when it loses.

The policy (README, "When no kernel beats eager"): the loop keeps the fastest correct program as the run's best
(it can be inspected, compared, resumed from and downloaded), but it never presents one slower than a measured
baseline as a gain. When the best is slower than eager PyTorch the run's result says "no kernel beats eager" and
names what to use: the fastest of the program, eager PyTorch and (when it was timed) torch.compile. The loop does
not substitute the eager module for the program: that module is what the user already has, a correct kernel for
the target is still a result worth keeping, and a bench must not count an eager module as a correct 1.0x kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

EAGER, COMPILED = "eager", "torch.compile"
PROGRAM = "program"


@dataclass(frozen=True)
class Standing:
    slower_than: tuple[str, ...]  # the baselines the best is slower than (EAGER, COMPILED), in that order
    use: str  # PROGRAM, EAGER or COMPILED: the fastest of the three as measured
    message: str  # the warning in words ("" when the best beats every measured baseline)

    @property
    def slower_than_eager(self) -> bool:
        return EAGER in self.slower_than


def standing(iteration: int, speedup_vs_eager: float | None, speedup_vs_compiled: float | None) -> Standing:
    """The best program's standing from its final speedups (a head-to-head's when one was run). A speedup that was
    not measured says nothing: only measured baselines can be beaten or lost to."""
    slower = tuple(name for name, s in ((EAGER, speedup_vs_eager), (COMPILED, speedup_vs_compiled))
                   if s is not None and s < 1.0)
    if not slower:
        return Standing((), PROGRAM, "")
    # each speedup is baseline time / program time, so the fastest option has the smallest relative time
    times = {PROGRAM: 1.0, EAGER: speedup_vs_eager, COMPILED: speedup_vs_compiled}
    use = min((name for name, t in times.items() if t is not None), key=lambda n: times[n])
    parts = []
    if speedup_vs_eager is not None and speedup_vs_eager < 1.0:
        parts.append(f"{speedup_vs_eager:.2f}x eager PyTorch ({1 / speedup_vs_eager:.2f}x slower)")
    if speedup_vs_compiled is not None and speedup_vs_compiled < 1.0:
        parts.append(f"{speedup_vs_compiled:.2f}x torch.compile ({1 / speedup_vs_compiled:.2f}x slower)")
    head = ("No kernel beats eager PyTorch" if EAGER in slower else "The best kernel beats eager PyTorch but not "
            "torch.compile")
    advice = {EAGER: "keep the PyTorch module as it is", COMPILED: "use torch.compile on the PyTorch module"}[use]
    return Standing(slower, use, f"{head}: the best correct program (iteration {iteration}) is "
                                 f"{' and '.join(parts)}; {advice}.")
