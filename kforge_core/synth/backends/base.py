"""The contract every candidate writer (backend) fulfils. It has a module of its own so the writers, which the
package's `select_backend` imports, do not import the package module back (no import circle)."""

from __future__ import annotations

from ..plan import rewrites
from ..plan.plans import ProgramPlan
from ..schedule import Schedule
from ...platform import TargetSpec


class Backend:
    kind = ""
    device_type = "cpu"
    fuses_cat = False  # evaluates `cat` primitives; without it `torch.cat` stays in PyTorch
    # tensor dtypes besides float32 its kernels read, write and round to (bf16/fp16 storage, math in float, as
    # PyTorch computes them); without them half-precision operands, casts and elementwise ops stay in PyTorch
    half_dtypes: tuple = ()
    # writes column kernels (`lower.colops`: reductions over other dims, scans, BatchNorm's batch statistics);
    # without them those reductions read a transposing copy and the rest stays in PyTorch
    column_kernels = False

    def program(self, plan: ProgramPlan, desc: dict, sched: Schedule, target: TargetSpec, header: str,
                marker: str) -> str:
        raise NotImplementedError

    def rewrites(self, sched: Schedule) -> tuple[str, ...]:
        """The plan rewrites (`plan.rewrites`, by name, in order) this writer's kernels want under `sched`."""
        return ()

    def refine(self, plan: ProgramPlan, sched: Schedule) -> ProgramPlan:
        """The plan as this writer's kernels will run it: its requested rewrites applied."""
        return rewrites.apply(plan, self.rewrites(sched))
