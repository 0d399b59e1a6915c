"""Prompt assembly: every slot the paper names is present when it should be, absent when it should not, and the
templates are the editable files under assets/prompts (overridable through $KFORGE_PROMPTS_DIR)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kforge_core.agents.base import AnalysisRequest, Feedback, GenerationRequest, Recommendation
from kforge_core.agents.prompts import (PROMPTS_DIR, PromptTemplateError, analysis_messages_text,
                                        generation_messages, render)
from kforge_core.platform import get_platform
from kforge_core.eval.rules import RULES

FIXTURES = Path(__file__).parent / "fixtures_loop"
COMPILE_LOG = "candidate line 9 (kernel line 4): error: expected ';' before '}' token"


def request(**overrides) -> GenerationRequest:
    values = dict(problem_source=(FIXTURES / "problem_relu.py").read_text(), problem_name="relu",
                  spec=get_platform("cpu").spec(), pass_name="functional", iteration=0)
    values.update(overrides)
    return GenerationRequest(**values)


def user_text(req: GenerationRequest) -> str:
    messages = generation_messages(req)
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[1]["content"]


def test_first_prompt_has_task_example_problem_and_rules():
    req = request()
    text = user_text(req)
    assert "relu" in text and req.spec.title in text
    assert req.spec.example_problem.strip() in text and req.spec.example_candidate.strip() in text  # single-shot example
    assert req.problem_source.strip() in text
    for rule in RULES:
        assert rule.summary.replace("from platforms.<target> import ...", "from platforms.cpu import compile_cpp") \
            in text
    # one imports rule, naming this target's module and helpers (no generic "platforms.<target>" beside it)
    assert "platforms.<target>" not in text and "Import only these from" not in text
    assert "and the target's compile helpers (from platforms.cpu import compile_cpp)." in text
    assert "What its evaluation said" not in text and "Reference" not in text
    assert "${" not in text and "$" not in text.replace("$$", "")  # every slot filled


def test_system_prompt_names_the_format_and_the_helpers():
    system = generation_messages(request())[0]["content"]
    assert "class ModelNew(nn.Module)" in system and "from platforms.cpu import compile_cpp" in system
    assert "```python" in system


def test_reference_program_says_which_target_it_is_for():
    text = user_text(request(reference_program="# the CUDA version\nclass ModelNew: ...\n", reference_target="cuda"))
    assert "for another target (cuda)" in text and "# the CUDA version" in text


def test_feedback_carries_the_compile_error_with_its_candidate_line():
    previous = (FIXTURES / "compile_error.py").read_text()
    fb = Feedback(status="compile_error", reason="C++ compilation failed: candidate line 9: error: expected ';'",
                  compile_log=COMPILE_LOG)
    text = user_text(request(iteration=1, previous_program=previous, feedback=fb))
    assert previous.strip() in text
    assert "It did not compile: C++ compilation failed: candidate line 9" in text
    assert COMPILE_LOG in text and "line numbers refer to the program as shown" in text


def test_feedback_with_timings_and_recommendations_in_the_optimization_pass():
    recs = [Recommendation("Vectorize the inner loop", "use #pragma omp simd", "scalar loop at 3% of roofline",
                           "~2x")]
    fb = Feedback(status="correct", reason="correct on 5 seeds", candidate_ms=0.5, eager_ms=1.0, compiled_ms=0.25,
                  recommendations=recs)
    text = user_text(request(pass_name="optimization", iteration=3, previous_program="class ModelNew: ...",
                             feedback=fb))
    assert "fastest correct program so far" in text
    assert "your program: 0.5 ms" in text and "speedup 2.00x" in text and "speedup 0.50x" in text
    assert "1. **Vectorize the inner loop**: use #pragma omp simd Why: scalar loop at 3% of roofline" in text
    assert "Make it faster" in text


def test_reply_without_program_is_fed_back():
    fb = Feedback(status="no_program", reason="the reply has no code block")
    text = user_text(request(iteration=1, feedback=fb))
    assert "The reply held no usable program: the reply has no code block" in text


def test_long_compiler_output_is_clipped():
    fb = Feedback(status="compile_error", reason="failed", compile_log="x" * 50_000)
    assert "more characters cut" in user_text(request(previous_program="p", feedback=fb))


def test_analysis_prompt_has_program_measurements_and_history():
    req = AnalysisRequest(
        program="class ModelNew: ...", problem_source="class Model: ...", spec=get_platform("cpu").spec(),
        profile={"tool": "torch.profiler", "per_forward_ms": 0.4, "custom_share": 0.9, "launches_per_forward": 1,
                 "kernels": [{"name": "kforge::relu", "ms_per_forward": 0.36, "share": 0.9, "calls_per_forward": 1,
                              "custom": True}], "notes": ["aten::empty_like takes 10% of the time"],
                 "ncu": {"dram_throughput_pct": 41}},
        roofline={"bytes": 8192, "flops": 0, "bandwidth_gbs": 9.6, "floor_ms": 0.00085, "bound": "memory",
                  "pct_of_roofline": 0.2},
        candidate_ms=0.4, eager_ms=0.1, compiled_ms=None, screenshots=[b"png"],
        history=[{"iteration": 3, "tried": "Vectorize", "outcome": "compile_error: bad pragma"}])
    system, user = analysis_messages_text(req)
    assert "JSON list" in system and "```json" in system
    assert "class ModelNew: ..." in user and "class Model: ..." in user
    assert "kforge::relu (custom): 0.36 ms per forward, 90% of the time" in user
    assert "aten::empty_like takes 10%" in user and '"dram_throughput_pct": 41' in user  # platform extras pass
    assert "memory-bound floor" in user and "at 0.2% of the roofline" in user and "Timings:" not in user
    assert "iteration 3: Vectorize -> compile_error: bad pragma" in user
    assert "1 profiler screenshot(s) are attached" in user


def test_analysis_prompt_without_profile_says_so():
    req = AnalysisRequest(program="p", problem_source="q", spec=get_platform("cpu").spec(), profile=None,
                          roofline=None, candidate_ms=None, eager_ms=None, compiled_ms=None)
    _, user = analysis_messages_text(req)
    assert "(no profile" in user and "(not measured)" in user and "(unknown)" in user


def test_templates_are_files_and_can_be_overridden(tmp_path, monkeypatch):
    assert (PROMPTS_DIR / "generation_user.md").is_file()
    (tmp_path / "generation_task.md").write_text("CUSTOM TASK for ${problem_name}; costs $$0\n")
    monkeypatch.setenv("KFORGE_PROMPTS_DIR", str(tmp_path))
    text = user_text(request())
    assert "CUSTOM TASK for relu; costs $0" in text
    assert request().spec.example_candidate.strip() in text  # the other templates still come from assets/prompts


def test_unknown_slot_is_a_clear_error(tmp_path, monkeypatch):
    (tmp_path / "generation_task.md").write_text("Task: ${no_such_slot}\n")
    monkeypatch.setenv("KFORGE_PROMPTS_DIR", str(tmp_path))
    with pytest.raises(PromptTemplateError, match=r"\$\{no_such_slot\}"):
        user_text(request())


def test_render_reports_a_lone_dollar(tmp_path, monkeypatch):
    (tmp_path / "generation_continue.md").write_text("costs $ 5")
    monkeypatch.setenv("KFORGE_PROMPTS_DIR", str(tmp_path))
    with pytest.raises(PromptTemplateError, match=r"\$\$"):
        render("generation_continue.md")


# ---------------------------------------------------------------------------------------------- issue 24


def test_budget_clips_logs_reasons_and_reference_before_the_program():
    from kforge_core.llm.tokens import estimate_prompt_tokens

    previous = (FIXTURES / "compile_error.py").read_text()
    fb = Feedback(status="compile_error", reason="failed: " + "r" * 5000, compile_log="x" * 50_000)
    req = request(iteration=1, previous_program=previous, feedback=fb, reference_program="# ref\n" + "y = 1\n" * 5000,
                  reference_target="cuda")
    full = generation_messages(req)
    budget = estimate_prompt_tokens(full) // 3
    clipped = generation_messages(req, budget)
    assert estimate_prompt_tokens(clipped) <= budget
    text = clipped[1]["content"]
    assert previous.strip() in text and req.problem_source.strip() in text  # never cut
    assert "x" * 1000 not in text and "r" * 1000 not in text
    assert estimate_prompt_tokens(generation_messages(req, 10**6)) == estimate_prompt_tokens(full)  # room: as is


def test_optimization_prompt_leaves_out_example_and_reference_and_shows_the_profile():
    fb = Feedback(status="correct", reason="ok", candidate_ms=0.5, eager_ms=1.0,
                  profile={"tool": "torch.profiler", "per_forward_ms": 0.5,
                           "kernels": [{"name": "kforge::relu", "ms_per_forward": 0.4, "share": 0.8,
                                        "calls_per_forward": 1, "custom": True}]},
                  roofline={"bytes": 8e6, "bandwidth_gbs": 20.0, "floor_ms": 0.4, "bound": "memory",
                            "pct_of_roofline": 80.0},
                  history=["iteration 3: Vectorize -> correct, 0.5 ms vs 0.6 ms before (1.20x)"])
    req = request(pass_name="optimization", iteration=4, previous_program="class ModelNew: ...", feedback=fb,
                  reference_program="# the CUDA version\n", reference_target="cuda")
    text = user_text(req)
    assert req.spec.example_candidate.strip() not in text and "the CUDA version" not in text
    assert "kforge::relu (custom): 0.4 ms per forward" in text and "runs at 80% of the roofline" in text
    assert "iteration 3: Vectorize -> correct" in text


def test_evaluation_facts_reach_the_prompt():
    from kforge_core.agents.facts import evaluation_facts

    gallery_problem = (Path(__file__).parents[1] / "assets/problems/level2/01_linear_bias_gelu.py").read_text()
    facts = evaluation_facts(gallery_problem, get_platform("cpu"), "cpu", "default")
    assert "batch_size = 1024" in facts and "not the ones written in the file" in facts
    assert "float32 atol 0.0001, rtol 0.0001" in facts and "Device:" in facts
    assert "batch_size" not in evaluation_facts(gallery_problem, get_platform("cpu"), None, "default")
    text = user_text(request(evaluation=facts))
    assert "## How it is judged" in text and "batch_size = 1024" in text


def test_system_prompt_lets_operators_stay_in_pytorch():
    system = generation_messages(request())[0]["content"]
    assert "may stay in PyTorch" in system


def test_analysis_prompt_has_the_rules_the_helpers_and_is_clipped_to_a_budget():
    history = [{"iteration": i, "tried": f"change {i} " + "z" * 300, "outcome": "incorrect"} for i in range(40)]
    req = AnalysisRequest(program="class ModelNew: ...", problem_source="class Model: ...",
                          spec=get_platform("cpu").spec(), profile=None, roofline=None, candidate_ms=1.0,
                          eager_ms=1.0, compiled_ms=None, history=history, screenshots=[b"png"],
                          screenshots_note="They were taken before this run")
    system, user = analysis_messages_text(req)
    assert "from platforms.cpu import compile_cpp" in system and "No threads, subprocesses" in system
    assert "They were taken before this run" in user
    assert "change 39" in user and "change 16 " in user and "change 15 " not in user  # the latest 24 at most
    _, clipped = analysis_messages_text(req, budget_tokens=1200)
    assert "change 39" in clipped and "change 16 " not in clipped  # fewer still, the latest kept


def test_device_facts_name_the_measured_ceilings(monkeypatch, tmp_path):
    from kforge_core.agents.facts import device_facts
    from kforge_core.eval import ceilings

    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path))
    platform = get_platform("cpu")
    ceilings.store("cpu", platform.device_name(), {"bandwidth_gbs": 21.5, "fp32_tflops": 0.25})
    facts = device_facts(platform)
    assert platform.device_name() in facts and "21.5 GB/s" in facts and "fp32 peak 0.25 TFLOP/s" in facts
