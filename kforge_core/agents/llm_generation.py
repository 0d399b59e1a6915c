"""The generation agent backed by an OpenAI-compatible chat model.

One call per request: the prompt (`prompts.generation_messages`: task, the platform's single-shot example, the
problem, an optional reference program for another target, the previous program with its evaluation and the
analysis agent's recommendations, the rules) goes out, the reply streams back through `on_token`, and
`extract.extract_program` finds the program in it.

A reply cut off at the length limit (`finish_reason == "length"`) is continued once: the model gets its partial
reply back and is asked to go on, and the two parts are joined. A second cut, or a reply without a usable program,
is a `GenerationResult(program=None, error=...)`: the model's mistake, recorded and fed back. Endpoint failures
(`LLMError`: unreachable, 5xx after retries, a broken stream) propagate to the loop, which decides what they cost.

Context: the prompt is clipped to the model's window (`LLMClient.context_window`); a context-length refusal is
answered once with a prompt clipped to what the server said, and a second one is the call's failure (a
`program=None` result), never an error that could stop the run. A program too long to come back in later prompts
is refused as the model's mistake. Thinking (`reasoning_content`, `<think>` blocks) is set apart before the program
is looked for, streamed to the sink's `thinking` method when it has one, and kept in `GenerationResult.thinking`.
A stream that breaks after the program's code block closed still delivers the program.
"""

from __future__ import annotations

from ..llm import ChatResult, LLMClient, LLMContextError, LLMError, LLMRequestError, LLMStreamError, prompt_budget
from ..llm.endpoint import with_served_models
from ..llm.tokens import estimate_prompt_tokens as _estimate
from ..llm.tokens import estimate_tokens
from .base import GenerationRequest, GenerationResult, TokenSink, Usage
from .extract import defines_model, extract_program, fenced_blocks
from .prompts import continuation_message, generation_messages
from .thinking import ThinkingRouter, split_thinking

# A program may fill at most this share of the prompt budget: it comes back in every later prompt (with its
# feedback), so a longer one would crowd out everything else, or not fit at all.
MAX_PROGRAM_SHARE = 0.4
# After a context-length refusal that names no window, the next try assumes this share of the last budget.
SHRINK_ON_REFUSAL = 0.6


class LLMGenerationAgent:
    def __init__(self, client: LLMClient, model: str | None = None):
        self.client = client
        self.model = model or client.config.model
        self.label = f"{self.model} @ {client.config.endpoint}"
        self.price_per_mtok = client.config.price_for("generation")  # (prompt, completion) per 1M tokens, or None

    def budget(self) -> int:
        """Estimated prompt tokens that fit the model's context with room for the answer."""
        return prompt_budget(self.client.context_window(self.model), self.client.config.max_tokens)

    def prompt(self, request: GenerationRequest) -> list[dict]:
        """The messages `generate` sends first (the loop records them before the call)."""
        return generation_messages(request, self.budget())

    def generate(self, request: GenerationRequest, on_token: TokenSink | None = None) -> GenerationResult:
        messages = self.prompt(request)
        notes: list[str] = []
        thinking: list[str] = []
        try:
            first, messages = self._chat_fitting(request, messages, on_token, notes)
        except LLMContextError as err:
            return GenerationResult(program=None, prompt=messages, notes="; ".join(notes),
                                    error=f"the prompt did not fit the model's context even clipped ({err}); load "
                                          "the model with a longer context (or set [llm] context_tokens)")
        except LLMStreamError as err:
            return self._from_broken_stream(err, messages, notes)
        usage = usage_of(first)
        thinking.append(first.reasoning)
        text = first.text
        if first.truncated:
            found = extract_program(split_thinking(text)[1])
            if found.program is not None and found.complete:
                # The program's block was closed before the cut: only trailing prose was lost.
                return self._result(text, usage, messages, ["the reply hit the length limit after the program's "
                                                             "code block ended"], thinking)
            try:
                more = self._chat([*messages, {"role": "assistant", "content": text}, continuation_message()],
                                  on_token)
            except LLMError as err:  # the first part was answered (and paid for) all the same
                err.prompt_tokens += usage.prompt_tokens
                err.completion_tokens += usage.completion_tokens
                if not isinstance(err, LLMStreamError):
                    raise
                err.partial_text = join_continuation(text, err.partial_text)
                return self._from_broken_stream(err, messages, notes)
            usage = _add(usage, usage_of(more))
            thinking.append(more.reasoning)
            text = join_continuation(text, more.text)
            notes.append("the reply hit the length limit; the model was asked to continue once and the two parts "
                         "were joined")
            if more.truncated:
                return GenerationResult(
                    program=None, reply_text=text, usage=usage, prompt=messages, notes="; ".join(notes),
                    thinking="\n".join(t for t in thinking if t),
                    error=f"the reply was cut off at the length limit twice (finish_reason=length, "
                          f"{len(text)} characters): write a shorter program (less commentary, no unused variants), "
                          f"or raise the model's max_tokens")
        return self._result(text, usage, messages, notes, thinking)

    # ---- calls
    def _chat(self, messages: list[dict], on_token: TokenSink | None) -> ChatResult:
        return chat_streaming(self.client, messages, self.model, on_token)

    def _chat_fitting(self, request: GenerationRequest, messages: list[dict], on_token: TokenSink | None,
                      notes: list[str]) -> tuple[ChatResult, list[dict]]:
        """One call; after a context-length refusal, once more with the prompt clipped to what the server said."""
        try:
            return self._chat(messages, on_token), messages
        except LLMContextError as err:
            budget = self.budget() if err.context_tokens else None
            if budget is None or budget >= _estimate(messages):
                budget = int(_estimate(messages) * SHRINK_ON_REFUSAL)
            clipped = generation_messages(request, budget)
            if _estimate(clipped) >= _estimate(messages):
                raise  # nothing left to clip: the same prompt would be refused again
            notes.append(f"the prompt (~{_estimate(messages)} tokens) did not fit the model's context; it was "
                         f"clipped to ~{_estimate(clipped)} tokens and sent again")
            return self._chat(clipped, on_token), clipped

    # ---- results
    def _from_broken_stream(self, err: LLMStreamError, messages: list[dict], notes: list[str]) -> GenerationResult:
        """A stream that broke after the program's code block closed still delivered the program; otherwise the
        endpoint failure goes to the loop."""
        thinking, answer = split_thinking(err.partial_text)
        found = extract_program(answer)
        if found.program is None or not found.complete:
            raise err
        usage = Usage(prompt_tokens=err.prompt_tokens, completion_tokens=err.completion_tokens,
                      model=self.model or "", estimated=True)
        notes = [*notes, f"the answer stream broke after the program's code block had closed ({err}); the "
                         "program was kept"]
        return self._result(err.partial_text, usage, messages, notes, [])

    def _result(self, text: str, usage: Usage, messages: list[dict], notes: list[str],
                thinking: list[str]) -> GenerationResult:
        thought, answer = split_thinking(text)
        thinking = [t for t in (*thinking, thought) if t]
        if thought:
            notes = [*notes, "the model's <think> reasoning was set apart from its answer"]
        found = extract_program(answer)
        if found.notes:
            notes = [*notes, found.notes]
        program, error = found.program, found.error
        limit = int(self.budget() * MAX_PROGRAM_SHARE)
        if program is not None and estimate_tokens(program) > limit:
            error = (f"the program is ~{estimate_tokens(program)} tokens, more than the ~{limit} that fit with the "
                     f"rest of a prompt in model {self.model}'s context: write a much shorter program (no comments "
                     "or unused variants, loops instead of unrolled copies)")
            program = None
        return GenerationResult(program=program, reply_text=answer, error=error, notes="; ".join(notes),
                                usage=usage, prompt=messages, thinking="\n".join(thinking),
                                alternatives=list(found.alternatives) if program is not None else [])


def chat_streaming(client: LLMClient, messages: list[dict], model: str | None, sink: TokenSink | None) -> ChatResult:
    """One streamed call whose answer goes to `sink`, its thinking (reasoning_content, <think> blocks) to
    `sink.thinking` and its retries to `sink.retrying`, when the sink has them (see agents.base)."""
    on_thinking = getattr(sink, "thinking", None)
    router = ThinkingRouter(sink, on_thinking)
    try:
        return client.chat(messages, model=model, on_token=router, on_reasoning=on_thinking,
                           on_retry=getattr(sink, "retrying", None))
    except LLMRequestError as err:  # an unknown model: say which ones the endpoint serves
        better = with_served_models(client, err, model)
        if better is err:
            raise
        raise better from None
    finally:
        router.flush()


def join_continuation(partial: str, continuation: str) -> str:
    """Join a cut-off reply and its continuation.

    Asked to go on "exactly where it stopped", most models do; some restart the code block (and the program).
    A continuation that opens with a fence while the partial reply is inside an open block is a restart: when it
    holds a whole program it replaces the partial reply, otherwise its fence line is dropped and the text joined."""
    stripped = continuation.lstrip()
    blocks = fenced_blocks(partial)
    inside_open_block = bool(blocks) and not blocks[-1].closed
    if inside_open_block and stripped.startswith(("```", "~~~")):
        if defines_model(continuation):
            return continuation
        first_newline = stripped.find("\n")
        rest = stripped[first_newline + 1:] if first_newline >= 0 else ""
        return partial.rstrip(" ") + ("" if partial.endswith("\n") else "\n") + rest
    return partial + continuation


def usage_of(result: ChatResult) -> Usage:
    return Usage(prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                 latency_s=result.latency_s, model=result.model, estimated=result.usage_estimated,
                 warning="; ".join(result.warnings))


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(prompt_tokens=a.prompt_tokens + b.prompt_tokens,
                 completion_tokens=a.completion_tokens + b.completion_tokens, latency_s=a.latency_s + b.latency_s,
                 model=b.model or a.model, estimated=a.estimated or b.estimated,
                 warning="; ".join(w for w in (a.warning, b.warning) if w))
