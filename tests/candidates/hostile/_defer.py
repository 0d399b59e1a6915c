"""Shared by the `judge_defer_*` hostile modules: the CPU example's kernel with most of its work deferred past the
end of the call (needs the static rules and guards disarmed: a candidate that got past them). Each forward runs the
kernel on the first row inside the call (so it launches and touches its output) and leaves the other rows to
`defer(work)`; every harness function that reads a forward's outputs (the comparison in one process, the arena
writer in the candidate's process) is wrapped to finish the deferred work first, so the outputs are always right by
the time anyone looks. In one process the timed call then measures one row: a faked speedup. With the judge, the
caller's CPU probe sees the work done after the call returned."""

import sys

import torch

from platforms.examples.cpu.candidate import ModelNew as Honest

pending = []  # callables that finish the deferred work, oldest first


def finish_all() -> None:
    while pending:
        pending.pop(0)()


def _joining(fn):
    def wrapper(*args, **kwargs):
        finish_all()
        return fn(*args, **kwargs)

    wrapper.kforge_joining = True
    return wrapper


def join_before_reading() -> None:
    for name, module in list(sys.modules.items()):
        if not name.startswith("kforge_core.eval.harness"):
            continue
        for attr in ("compare_outputs", "write"):
            fn = getattr(module, attr, None)
            if callable(fn) and not getattr(fn, "kforge_joining", False):
                setattr(module, attr, _joining(fn))


class DeferredModel(Honest):
    def defer(self, work) -> None:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        bias = self.bias.detach().contiguous()
        rows, cols = x.shape
        self.lib.swish_bias(x[:1], bias, out[:1], 1, cols)  # a launch inside the call

        def rest() -> None:
            self.lib.swish_bias(x[1:], bias, out[1:], rows - 1, cols)

        self.defer(rest)
        return out
