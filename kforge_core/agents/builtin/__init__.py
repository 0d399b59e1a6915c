"""Built-in, rule-based agents: real kernels with no LLM.

- `BuiltinGenerationAgent()`: traces the reference with torch.fx in a sandboxed child process, maps supported nodes
  to kernel templates (elementwise chains with broadcasting, last-dimension reductions and row operators such as
  softmax / LayerNorm / RMSNorm, fused epilogues of matrix products), keeps the rest as PyTorch calls, and writes a
  candidate in the target's format (C++/OpenMP through `platforms.cpu.compile_cpp` on CPU).
- `BuiltinAnalysisAgent()`: maps profile and roofline facts to moves from a fixed catalogue
  (`fuse`, `parallelize_rows`, `vectorize`, `block_shape`, `unroll`, `warp_reduce`).

Both carry `label = "built-in, rule-based (no LLM)"`. `build_agents(config)` builds the pair for a run.
"""

from __future__ import annotations

from .analysis import BuiltinAnalysisAgent
from .generation import BuiltinGenerationAgent
from .schedule import CATALOGUE, LABEL, Schedule

__all__ = ["BuiltinGenerationAgent", "BuiltinAnalysisAgent", "build_agents", "LABEL", "CATALOGUE", "Schedule"]


def build_agents(config) -> tuple[BuiltinGenerationAgent, BuiltinAnalysisAgent]:
    """The agents of a run (`kforge_core.agents.factory`): the generator traces at the run's size class."""
    size_class = getattr(config, "size_class", None)
    return BuiltinGenerationAgent(size_class=size_class if size_class else None), BuiltinAnalysisAgent()
