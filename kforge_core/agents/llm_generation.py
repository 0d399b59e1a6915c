"""The generation agent backed by an OpenAI-compatible chat model.

One call per request: the prompt (`prompts.generation_messages`: task, the platform's single-shot example, the
problem, an optional reference program for another target, the previous program with its evaluation and the
analysis agent's recommendations, the rules) goes out, the reply streams back through `on_token`, and
`extract.extract_program` finds the program in it.

A reply cut off at the length limit (`finish_reason == "length"`) is continued once: the model gets its partial
reply back and is asked to go on, and the two parts are joined. A second cut, or a reply without a usable program,
is a `GenerationResult(program=None, error=...)`: the model's mistake, recorded and fed back. Endpoint failures
(`LLMError`: unreachable, 5xx after retries, a broken stream) propagate to the loop, which decides what they cost.
"""

from __future__ import annotations

from ..llm import ChatResult, LLMClient
from .base import GenerationRequest, GenerationResult, TokenSink, Usage
from .extract import defines_model, extract_program, fenced_blocks
from .prompts import continuation_message, generation_messages


class LLMGenerationAgent:
    def __init__(self, client: LLMClient, model: str | None = None):
        self.client = client
        self.model = model or client.config.model
        self.label = f"{self.model} @ {client.config.endpoint}"

    def prompt(self, request: GenerationRequest) -> list[dict]:
        """The messages `generate` sends first (the loop records them before the call)."""
        return generation_messages(request)

    def generate(self, request: GenerationRequest, on_token: TokenSink | None = None) -> GenerationResult:
        messages = self.prompt(request)
        first = self.client.chat(messages, model=self.model, on_token=on_token)
        usage = usage_of(first)
        text = first.text
        notes: list[str] = []
        if first.truncated:
            found = extract_program(text)
            if found.program is not None and found.complete:
                # The program's block was closed before the cut: only trailing prose was lost.
                return self._result(text, found, usage, messages, ["the reply hit the length limit after the "
                                                                   "program's code block ended"])
            more = self.client.chat([*messages, {"role": "assistant", "content": text}, continuation_message()],
                                    model=self.model, on_token=on_token)
            usage = _add(usage, usage_of(more))
            text = join_continuation(text, more.text)
            notes.append("the reply hit the length limit; the model was asked to continue once and the two parts "
                         "were joined")
            if more.truncated:
                return GenerationResult(
                    program=None, reply_text=text, usage=usage, prompt=messages, notes="; ".join(notes),
                    error=f"the reply was cut off at the length limit twice (finish_reason=length, "
                          f"{len(text)} characters): write a shorter program (less commentary, no unused variants), "
                          f"or raise the model's max_tokens")
        return self._result(text, extract_program(text), usage, messages, notes)

    @staticmethod
    def _result(text: str, found, usage: Usage, messages: list[dict], notes: list[str]) -> GenerationResult:
        if found.notes:
            notes = [*notes, found.notes]
        return GenerationResult(program=found.program, reply_text=text, error=found.error, notes="; ".join(notes),
                                usage=usage, prompt=messages)


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
                 latency_s=result.latency_s, model=result.model, estimated=result.usage_estimated)


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(prompt_tokens=a.prompt_tokens + b.prompt_tokens,
                 completion_tokens=a.completion_tokens + b.completion_tokens, latency_s=a.latency_s + b.latency_s,
                 model=b.model or a.model, estimated=a.estimated or b.estimated)
