"""The built-in kernel compiler behind the rule-based agents: trace -> lower -> plan -> backends.

- `trace`: the problem's `Model` traced (torch.fx, torch.export) in a sandboxed child into a JSON description;
- `lower/`: the description lowered into primitives (`ir`, `graph`, operator tables, CSE);
- `plan/`: primitives grouped into backend-independent kernel plans (`fusion.build_plan`);
- `backends/`: the candidate program each target runs (CPU C++, CUDA, Triton, Metal, and the host Python);
- `schedule`: which optimization moves a candidate carries.
"""
