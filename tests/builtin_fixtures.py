"""What the built-in agents' tests share: the problems they synthesize (small sizes), the generation agent, requests,
and a candidate judged by the real evaluator on the CPU target (EvalOptions(timing=False)). Importing it skips a
module where the CPU target has no C++ compiler.
"""

from __future__ import annotations

import textwrap

import pytest

from kforge_core.agents.base import Feedback, GenerationRequest
from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.eval.evaluator import EvalOptions, evaluate
from kforge_core.eval.rules import check_candidate
from kforge_core.platform import get_platform
from kforge_core.problem import load_problem


CPU = get_platform("cpu")
if not CPU.availability().ok:  # pragma: no cover - CI has g++
    pytest.skip("no C++ compiler", allow_module_level=True)


def _src(body: str) -> str:
    return textwrap.dedent(body).strip() + "\n"


ROWS = _src('''
    """Softmax, log_softmax and sum / mean / max reductions over the last dimension."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            a = torch.softmax(x * 2.0, dim=-1)
            b = torch.log_softmax(x, dim=-1)
            s = x.sum(dim=-1, keepdim=True)
            m = x.mean(-1)
            mx = torch.amax(x, dim=-1)
            v = torch.max(x, dim=-1).values
            return a + b + s / 100.0, m + mx - v


    def get_inputs():
        return [torch.randn(6, 9, 300)]


    def get_init_inputs():
        return []
''')

NORMS = _src('''
    """LayerNorm (module) of a residual sum, then RMSNorm written out as x * rsqrt(mean(x^2) + eps) * w."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, hidden, eps):
            super().__init__()
            self.norm = nn.LayerNorm(hidden)
            with torch.no_grad():
                self.norm.weight.add_(0.1 * torch.randn(hidden))
                self.norm.bias.add_(0.1 * torch.randn(hidden))
            self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
            self.eps = eps

        def forward(self, x, residual):
            h = self.norm(x + residual)
            return h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


    def get_inputs():
        return [torch.randn(4, 33, 96), torch.randn(4, 33, 96)]


    def get_init_inputs():
        return [96, 1e-6]
''')

LINEAR_GELU = _src('''
    """Linear with bias then GELU: the matmul stays in the vendor library, bias + GELU is one epilogue kernel."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Model(nn.Module):
        def __init__(self, n_in, n_out):
            super().__init__()
            self.fc = nn.Linear(n_in, n_out)

        def forward(self, x):
            return F.gelu(self.fc(x))


    def get_inputs():
        return [torch.randn(64, 48)]


    def get_init_inputs():
        return [48, 80]
''')

SOFTMAX_CHAIN = _src('''
    """Scaled, biased softmax followed by a SiLU gate: elementwise and row work the moves can change."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Model(nn.Module):
        def __init__(self, cols):
            super().__init__()
            self.bias = nn.Parameter(0.1 * torch.randn(cols))

        def forward(self, x, gate):
            p = torch.softmax(x * 0.5 + self.bias, dim=-1)
            return p * F.silu(gate) + torch.tanh(gate) * 0.01


    def get_inputs():
        return [torch.randn(37, 257), torch.randn(37, 257)]


    def get_init_inputs():
        return [257]
''')


FAST = EvalOptions(timing=False)


@pytest.fixture(scope="module")
def agent() -> BuiltinGenerationAgent:
    return BuiltinGenerationAgent()


def _request(source: str, name: str, pass_name: str = "functional", previous: str | None = None,
             feedback: Feedback | None = None, iteration: int = 0) -> GenerationRequest:
    return GenerationRequest(problem_source=source, problem_name=name, spec=CPU.spec(), pass_name=pass_name,
                             iteration=iteration, previous_program=previous, feedback=feedback)


def _judge(source: str, program: str, name: str = "p"):
    assert not check_candidate(program, CPU.module_name, CPU.candidate_api), "static rules reject the candidate"
    verdict = evaluate(load_problem(text=source, name=name), program, "cpu", FAST)
    assert verdict.status == "correct", f"{verdict.status}: {verdict.reason}\n{verdict.compile_log}\n{verdict.log_tail}"
    assert sum(verdict.kernel_launches.values()) > 0
    return verdict
