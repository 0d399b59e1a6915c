"""Patching the comparison (needs the static rules and guards disarmed: a candidate that got past them). At import
it replaces `compare_outputs` and `tensors_equal` in every module that holds them (the comparison module and each
module that imported the names) with functions that always agree. Its output is wrong (half the right values). In
one process every check then passes; with the judge, the functions it replaced are the candidate's process's own,
and the judge's comparison is in a process it cannot name."""

import sys

import torch

from platforms.examples.cpu.candidate import ModelNew as Honest  # the CPU example's kernel (launches, is right)

compare = sys.modules["kforge_core.eval.harness.compare"]
patched = {compare.compare_outputs: lambda got, want, policy: compare.Comparison(True, "all outputs match"),
           compare.tensors_equal: lambda a, b: True}
for module in list(sys.modules.values()):
    for name in ("compare_outputs", "tensors_equal"):
        if getattr(module, name, None) in patched:
            setattr(module, name, patched[getattr(module, name)])


class ModelNew(Honest):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 0.5  # wrong, and still varying with the inputs
