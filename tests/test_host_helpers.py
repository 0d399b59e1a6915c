"""A built-in program embeds only the host helpers its own code calls (and the helpers those call): no dead code
between its kernels and `ModelNew`, and never a helper missing."""

from __future__ import annotations

import ast

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.gallery import get_problem
from kforge_core.synth.backends.host_helpers import HELPERS, helpers_for

ALL = {n.name if isinstance(n, ast.FunctionDef) else n.targets[0].id for n in ast.parse(HELPERS).body}


def defined(text: str) -> set[str]:
    return {n.name if isinstance(n, ast.FunctionDef) else n.targets[0].id for n in ast.parse(text).body
            if isinstance(n, (ast.FunctionDef, ast.Assign))} if text else set()


def test_helpers_for_takes_what_is_called_and_what_that_calls():
    assert defined(helpers_for({"kf_meta"})) == {"kf_meta", "kf_fast", "KF_META"}
    assert defined(helpers_for({"kf_views", "x"})) == {"kf_views", "kf_address"}
    assert helpers_for({"torch", "x"}) == ""
    # in HELPERS' order, each once
    text = helpers_for({"kf_meta", "kf_shape", "kf_fast"})
    assert text.index("def kf_shape") < text.index("def kf_fast") < text.index("def kf_meta")
    assert text.count("def kf_fast") == 1


@pytest.fixture(scope="module")
def agent():
    return BuiltinGenerationAgent(size_class="auto")


@pytest.mark.parametrize("problem,target", [("level1/01_relu", "cpu"), ("level2/06_swish_bias_clamp", "cpu"),
                                            ("level1/01_relu", "triton")])
def test_generated_program_embeds_exactly_the_helpers_it_calls(agent, problem, target):
    result = agent.synthesize(get_problem(problem).source, target, problem_name=problem)
    assert result.program is not None, result.error
    tree = ast.parse(result.program)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    embedded = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} & ALL
    called = {n.id for n in ast.walk(model) if isinstance(n, ast.Name)} & ALL
    assert called, "ModelNew calls no host helper"
    assert called <= embedded  # none missing
    assert embedded == defined(helpers_for(called)) - {"KF_META"}  # none more than it (transitively) needs
    assert "def kf_meta" not in result.program or "kf_meta(" in ast.unparse(model)
    # the program still runs its helpers: it compiles as Python
    compile(result.program, "candidate.py", "exec")
