"""Loosening the tolerance in place (needs the static rules and guards disarmed: a candidate that got past them).
At import it rewrites every tolerance policy object the harness holds or will hold (frozen dataclasses, changed
with object.__setattr__, so references already taken see it too) to atol = rtol = 1e30. Its output is wrong (half
the right values, still varying with the inputs). In one process the comparison then passes; with the judge, the
policies it rewrote are the candidate's process's own copies, which judge nothing."""

import sys

import torch

from platforms.examples.cpu.candidate import ModelNew as Honest  # the CPU example's kernel (launches, is right)

for policy in sys.modules["kforge_core.eval.tolerance"].POLICIES.values():
    for dtype in ("fp32", "half", "bf16", "fp64"):
        for field in ("atol", "rtol", "rel_l2_max"):
            object.__setattr__(getattr(policy, dtype), field, 1e30)


class ModelNew(Honest):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 0.5  # wrong, and still varying with the inputs
