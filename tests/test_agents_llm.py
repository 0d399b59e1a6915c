"""The LLM-backed agents against a real local OpenAI-protocol HTTP server (tests/fakes/openai_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kforge_core.agents.base import AnalysisRequest, GenerationRequest, Recommendation
from kforge_core.agents.factory import build_agents
from kforge_core.agents.llm_analysis import LLMAnalysisAgent, parse_recommendations
from kforge_core.agents.llm_generation import LLMGenerationAgent, join_continuation
from kforge_core.errors import UsageError
from kforge_core.llm import LLMClient, LLMServerError, LLMStreamError
from kforge_core.loop.config import RunConfig
from kforge_core.platform import TargetSpec
from tests.fakes.openai_replies import empty_choices, image_rejected, rate_limited, reply, server_error, truncated
from tests.fakes.openai_server import FakeOpenAIServer

FIXTURES = Path(__file__).parent / "fixtures_loop"
PROGRAM = (FIXTURES / "correct_fast.py").read_text()
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture
def server():
    with FakeOpenAIServer(models=("gen-model", "ana-model")) as s:
        yield s


@pytest.fixture
def client(server):
    with LLMClient(server.llm_config(model="gen-model", analysis_model="ana-model")) as c:
        yield c


CPU_SPEC = TargetSpec(name="cpu", title="CPU", device_type="cpu", module="platforms.cpu",
                      candidate_api=("compile_cpp",), formats=("ctypes",), kernel_language="cpp",
                      example_problem="# example problem", example_candidate="# example candidate")


def gen_request(**kw) -> GenerationRequest:
    values = dict(problem_source="class Model: ...", problem_name="relu", spec=CPU_SPEC, pass_name="functional",
                  iteration=0)
    values.update(kw)
    return GenerationRequest(**values)


def analysis_request(**kw) -> AnalysisRequest:
    values = dict(program=PROGRAM, problem_source="class Model: ...", spec=CPU_SPEC,
                  profile=None, roofline=None, candidate_ms=0.5, eager_ms=0.1, compiled_ms=None)
    values.update(kw)
    return AnalysisRequest(**values)


# ---------------------------------------------------------------------------------------------- generation


def test_generation_streams_and_extracts(server, client):
    server.enqueue(f"Fused.\n```python\n{PROGRAM}```\n")
    tokens: list[str] = []
    result = LLMGenerationAgent(client).generate(gen_request(), on_token=tokens.append)
    assert result.program == PROGRAM and result.error is None
    assert "".join(tokens) == result.reply_text and len(tokens) > 10  # really streamed
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    assert result.prompt[1]["content"] in server.chat_requests[0].prompt
    assert server.chat_requests[0].stream


def test_reply_without_code_is_data_not_an_exception(server, client):
    server.enqueue("I would write a kernel that fuses the ops, but I'd rather not.")
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program is None and "no code block" in result.error
    assert result.reply_text.startswith("I would write")


def test_cut_off_reply_is_continued_once_and_joined(server, client):
    head, tail = PROGRAM[:200], PROGRAM[200:]
    server.enqueue(reply(f"```python\n{head}", finish_reason="length"), reply(f"{tail}```\n"))
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program == PROGRAM
    assert "asked to continue once" in result.notes
    second = server.chat_requests[1].messages
    assert second[-2] == {"role": "assistant", "content": f"```python\n{head}"}
    assert "cut off by the length limit" in second[-1]["content"]
    assert result.usage.completion_tokens > 0


def test_cut_off_twice_is_a_failed_generation_with_a_clear_reason(server, client):
    server.enqueue(reply("```python\nimport torch\n", finish_reason="length"),
                   reply("class ModelNew(", finish_reason="length"))
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program is None
    assert "cut off at the length limit twice" in result.error and "max_tokens" in result.error


def test_cut_off_after_the_code_block_needs_no_continuation(server, client):
    server.enqueue(reply(f"```python\n{PROGRAM}```\nThis program works by fusing", finish_reason="length"))
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program == PROGRAM and len(server.chat_requests) == 1


def test_continuation_that_restarts_the_program_replaces_the_partial_reply():
    assert join_continuation("```python\nimport tor", f"```python\n{PROGRAM}```") == f"```python\n{PROGRAM}```"
    assert join_continuation("```python\nimport tor", "ch\n") == "```python\nimport torch\n"


def test_429_then_success(server, client):
    server.enqueue(rate_limited(retry_after=0), f"```python\n{PROGRAM}```")
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program == PROGRAM and len(server.chat_requests) == 2


def test_endpoint_failures_raise_typed_errors_for_the_loop(server, client):
    server.enqueue(server_error(), server_error(), server_error())
    with pytest.raises(LLMServerError, match="HTTP 500"):
        LLMGenerationAgent(client).generate(gen_request())
    server.enqueue(truncated(f"```python\n{PROGRAM}```", after_chunks=5))
    with pytest.raises(LLMStreamError) as info:
        LLMGenerationAgent(client).generate(gen_request())
    assert info.value.partial_text.startswith("```pyth")


# ---------------------------------------------------------------------------------------------- analysis

RECS_JSON = """Looking at the profile, the kernel is scalar.
```json
[
  {"title": "Vectorize", "change": "add #pragma omp simd", "why": "3% of roofline", "expected_gain": "~2x"},
  {"title": "Drop the copy", "change": "skip x.contiguous()", "why": "aten::contiguous is 10%",
   "expected_gain": "10%"},
]
```"""


def test_analysis_parses_json_recommendations(server, client):
    server.enqueue_for("ana-model", RECS_JSON)
    agent = LLMAnalysisAgent(client)
    result = agent.analyze(analysis_request())
    assert [r.title for r in result.recommendations] == ["Vectorize", "Drop the copy"]  # trailing comma repaired
    assert result.recommendations[0] == Recommendation("Vectorize", "add #pragma omp simd", "3% of roofline", "~2x")
    assert server.chat_requests[0].model == "ana-model" and agent.label.startswith("ana-model @ http://127.0.0.1")


def test_analysis_with_screenshots_sends_images(server, client):
    server.enqueue_for("ana-model", RECS_JSON)
    LLMAnalysisAgent(client).analyze(analysis_request(screenshots=[PNG, PNG]))
    assert len(server.chat_requests[0].image_urls) == 2
    assert server.chat_requests[0].image_urls[0].startswith("data:image/png;base64,")


def test_model_rejecting_images_is_asked_again_without_them(server, client):
    server.enqueue_for("ana-model", image_rejected(), RECS_JSON, RECS_JSON)
    agent = LLMAnalysisAgent(client)
    result = agent.analyze(analysis_request(screenshots=[PNG]))
    assert len(result.recommendations) == 2
    assert "rejected the 1 profiler screenshot(s)" in result.notes and "without them" in result.notes
    first, second = server.chat_requests
    assert first.image_urls and not second.image_urls
    # later calls leave the images out from the start, and say so
    again = agent.analyze(analysis_request(screenshots=[PNG]))
    assert not server.chat_requests[2].image_urls and "not sent" in again.notes


def test_analysis_reply_without_recommendations_is_reported(server, client):
    server.enqueue_for("ana-model", "OK.")
    result = LLMAnalysisAgent(client).analyze(analysis_request())
    assert result.recommendations == [] and "no recommendations" in result.error


def test_analysis_reply_in_prose_is_passed_on_clipped(server, client):
    prose = ("The kernel is memory-bound at 20% of the bandwidth roofline. You should fuse the bias add into the "
             "main loop and vectorize the inner loop so that each element is read once. " * 40)
    server.enqueue_for("ana-model", "<think>They want advice; I could say ```python\nclass ModelNew: draft</think>"
                                    + prose)
    result = LLMAnalysisAgent(client).analyze(analysis_request())
    assert result.error is None and len(result.recommendations) == 1
    (rec,) = result.recommendations
    assert rec.title.startswith("The kernel is memory-bound") and "fuse the bias add" in rec.change
    assert len(rec.change) <= 1500 and rec.change.endswith("…")  # clipped
    assert "ModelNew" not in rec.change and "draft" in result.thinking  # the thinking is no advice
    assert "prose" in result.notes


def test_empty_choices_is_a_typed_error(server, client):
    from kforge_core.llm import LLMBadResponseError

    server.enqueue_for("ana-model", empty_choices())
    with pytest.raises(LLMBadResponseError, match="no choices"):
        LLMAnalysisAgent(client).analyze(analysis_request())


@pytest.mark.parametrize("text, titles", [
    ("1. **Vectorize the loop**: use simd. Why: scalar code. Expected gain: 2x\n"
     "2. **Fuse the bias**: one pass instead of two, because memory-bound\n", ["Vectorize the loop", "Fuse the bias"]),
    ("- Use OpenMP: parallelize rows across 2 cores\n  (continuation of the item)\n- Unroll by 4\n",
     ["Use OpenMP", "Unroll by 4"]),
    ('{"recommendations": [{"name": "Tile", "description": "tile 64x64", "rationale": "cache misses"}]}', ["Tile"]),
    ('Here: [{"title": "Block", "change": "block the loop"}] done.', ["Block"]),
])
def test_recommendation_parser_fallbacks(text, titles):
    recs = parse_recommendations(text)
    assert [r.title for r in recs] == titles


def test_bulleted_item_fields():
    (rec,) = parse_recommendations("* **Vectorize**: add simd pragmas, because the loop is scalar. "
                                   "Expected gain: ~2x\n")
    assert rec.change == "add simd pragmas" and rec.why == "the loop is scalar." and rec.expected_gain == "~2x"


# ---------------------------------------------------------------------------------------------- factory


def test_factory_builds_llm_agents_with_per_role_models(server):
    cfg = RunConfig(problem_source="", problem_name="p", target="cpu", model="gen-model",
                    analysis_model="ana-model", base_url=server.base_url)
    generation, analysis = build_agents(cfg)
    assert generation.model == "gen-model" and analysis.model == "ana-model"
    assert generation.label == f"gen-model @ {server.base_url}"


def test_factory_unknown_agent_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown agent"):
        build_agents(RunConfig(problem_source="", problem_name="p", target="cpu", agent="magic"))


# ---------------------------------------------------------------------------------------------- issue 24


class Sink:
    """A loop-like token sink: answer, thinking and retries apart."""

    def __init__(self):
        self.answer, self.thinking_text, self.retries = [], [], []

    def __call__(self, text):
        self.answer.append(text)

    def thinking(self, text):
        self.thinking_text.append(text)

    def retrying(self, event):
        self.retries.append(event)


def test_think_block_with_an_unclosed_fence_does_not_swallow_the_answer(server, client):
    reply_text = (f"<think>I could start with ```python\nclass ModelNew: draft that never closes\n</think>\n"
                  f"Here it is.\n```python\n{PROGRAM}```\n")
    server.enqueue(reply_text)
    sink = Sink()
    result = LLMGenerationAgent(client).generate(gen_request(), on_token=sink)
    assert result.program == PROGRAM
    assert "draft that never closes" in result.thinking and "<think>" not in result.reply_text
    # shown live: the thinking went to the sink's thinking channel, the answer to the answer channel
    assert "draft that never closes" in "".join(sink.thinking_text)
    assert "".join(sink.answer).strip() == result.reply_text.strip() and "<think" not in "".join(sink.answer)
    assert "set apart" in result.notes


def test_unterminated_think_holding_the_only_draft_is_no_program(server, client):
    server.enqueue(f"<think>Maybe:\n```python\n{PROGRAM}```\nbut I am not sure")
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program is None and "class ModelNew" in result.thinking
    assert result.error == "the reply was empty"


def test_lone_closing_think_tag_of_templates_that_open_it_in_the_prompt(server, client):
    server.enqueue(f"draft ```python\nclass ModelNew: pass\n</think>```python\n{PROGRAM}```")
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program == PROGRAM and result.thinking.startswith("draft")


def test_reasoning_content_reaches_the_thinking_channel_and_the_result(server, client):
    from tests.fakes.openai_replies import thinking

    server.enqueue(thinking("First, tile the rows.", f"```python\n{PROGRAM}```"))
    sink = Sink()
    result = LLMGenerationAgent(client).generate(gen_request(), on_token=sink)
    assert result.program == PROGRAM and result.thinking == "First, tile the rows."
    assert "".join(sink.thinking_text) == "First, tile the rows."


def test_thinking_router_splits_tags_across_deltas():
    from kforge_core.agents.thinking import ThinkingRouter

    answer, thought = [], []
    router = ThinkingRouter(answer.append, thought.append)
    for piece in ["Hi <th", "ink>deep ", "thought</thi", "nk> done <", "b>"]:
        router(piece)
    router.flush()
    assert "".join(answer) == "Hi  done <b>" and "".join(thought) == "deep thought"


def test_context_refusal_is_answered_with_a_clipped_prompt(server, client):
    long_log = "candidate line 9: error: 'acc' was not declared in this scope\n" * 400
    from kforge_core.agents.base import Feedback

    request = gen_request(previous_program=PROGRAM, feedback=Feedback("compile_error", "did not compile",
                                                                      compile_log=long_log))
    agent = LLMGenerationAgent(client)
    full = agent.prompt(request)
    size = sum(len(m["content"]) for m in full) // 4
    server.context_limit = size - 500  # the server holds less than the default window we planned for
    server.enqueue(f"```python\n{PROGRAM}```")
    result = agent.generate(request)
    assert result.program == PROGRAM
    first, second = server.chat_requests
    assert len(second.prompt) < len(first.prompt) and "more characters cut" in second.prompt
    assert "did not fit the model's context" in result.notes and result.prompt[1]["content"] in second.prompt
    # later prompts are clipped from the start
    assert sum(len(m["content"]) for m in agent.prompt(request)) // 4 <= server.context_limit


def test_context_refusal_twice_is_a_failed_generation_not_an_exception(server, client):
    server.context_limit = 10  # nothing fits
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program is None and "did not fit the model's context even clipped" in result.error
    assert len(server.chat_requests) == 2


def test_analysis_context_refusal_is_no_recommendations(server, client):
    server.context_limit = 10
    result = LLMAnalysisAgent(client).analyze(analysis_request())
    assert result.recommendations == [] and "did not fit the model's context" in result.error


def test_over_long_program_is_refused_as_the_models_mistake(server):
    huge = PROGRAM + "".join(f"# padding comment line {i} " + "x" * 60 + "\n" for i in range(3000))
    server.enqueue(reply(f"```python\n{huge}```", chunk_chars=8192))
    with LLMClient(server.llm_config(model="gen-model", context_tokens=32768)) as c:
        result = LLMGenerationAgent(c).generate(gen_request())
    assert result.program is None and "write a much shorter program" in result.error


@pytest.mark.parametrize("fault", ["dropped", "no_finish_reason"])
def test_stream_that_breaks_after_the_fence_closed_keeps_the_program(server, client, fault):
    text = f"```python\n{PROGRAM}```\nThis program fuses the two loops and then"
    if fault == "dropped":
        server.enqueue(truncated(text, after_chunks=len(text) // 4 - 3))
    else:
        server.enqueue(reply(text, finish_reason=None))
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program == PROGRAM and "the program was kept" in result.notes
    assert result.usage.estimated and result.usage.completion_tokens > 0


def test_retries_reach_the_sink(server, client):
    server.enqueue(server_error(), f"```python\n{PROGRAM}```")
    sink = Sink()
    assert LLMGenerationAgent(client).generate(gen_request(), on_token=sink).program == PROGRAM
    (event,) = sink.retries
    assert "HTTP 500" in str(event.error)


def test_two_programs_are_both_offered(server, client):
    draft = "# draft\n" + PROGRAM
    server.enqueue(f"Draft:\n```python\n{draft}```\nFinal:\n```python\n{PROGRAM}```")
    result = LLMGenerationAgent(client).generate(gen_request())
    assert result.program == PROGRAM and result.alternatives == [draft]


def test_a_failed_continuation_carries_the_first_parts_tokens(server, client):
    server.enqueue(reply("```python\nimport torch\n", finish_reason="length", prompt_tokens=500,
                         completion_tokens=7), server_error(), server_error(), server_error())
    with pytest.raises(LLMServerError) as info:
        LLMGenerationAgent(client).generate(gen_request())
    assert info.value.prompt_tokens == 500 and info.value.completion_tokens == 7  # recorded by the loop
