"""Reasoning that models write into the answer itself: `<think>...</think>` (Qwen3, QwQ, DeepSeek-R1 distills served
by Ollama, LM Studio, or vLLM without a reasoning parser).

The thinking is not the answer: a code fence opened while thinking and never closed would swallow the real program,
and a draft that exists only in the thinking must never be evaluated. `split_thinking` separates the two after the
fact (an unterminated `<think>` holds everything after it; a lone `</think>` -- the chat template opened the
block in the prompt -- ends thinking that began with the reply); `ThinkingRouter` does the same live, token by
token, so the thinking can be shown apart while it streams.
"""

from __future__ import annotations

import re
from typing import Callable

_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_TAGS = ("think", "thinking", "reasoning")


def split_thinking(text: str) -> tuple[str, str]:
    """(thinking, answer) of a reply: every `<think>` block moved out of the answer, the thinking blocks joined."""
    thoughts: list[str] = []
    answer: list[str] = []
    rest = text or ""
    # A close tag before any open tag: the template opened the block, the reply starts inside it.
    first_open = _OPEN.search(rest)
    lone_close = re.search(r"</(think|thinking|reasoning)>", rest, re.IGNORECASE)
    if lone_close and (first_open is None or lone_close.start() < first_open.start()):
        thoughts.append(rest[:lone_close.start()])
        rest = rest[lone_close.end():]
    while True:
        m = _OPEN.search(rest)
        if m is None:
            answer.append(rest)
            break
        answer.append(rest[:m.start()])
        close = re.search(rf"</{m.group(1)}>", rest[m.end():], re.IGNORECASE)
        if close is None:  # unterminated: the model was cut off (or stopped) while thinking
            thoughts.append(rest[m.end():])
            break
        thoughts.append(rest[m.end():m.end() + close.start()])
        rest = rest[m.end() + close.end():]
    return "\n".join(t.strip("\n") for t in thoughts if t.strip()), "".join(answer).lstrip("\n")


class ThinkingRouter:
    """Feeds streamed text to `on_answer` or `on_thinking` as it arrives, holding back only what could be the start
    of a tag split across two deltas."""

    def __init__(self, on_answer: Callable[[str], None] | None, on_thinking: Callable[[str], None] | None):
        self.on_answer, self.on_thinking = on_answer, on_thinking
        self._inside: str | None = None  # the open tag's name while inside a block
        self._held = ""

    def __call__(self, text: str) -> None:
        self._held += text
        while self._held:
            if self._inside is None:
                m = _OPEN.search(self._held)
                if m is not None:
                    self._emit(self._held[:m.start()], thinking=False)
                    self._inside, self._held = m.group(1).lower(), self._held[m.end():]
                    continue
            else:
                close = f"</{self._inside}>"
                at = self._held.lower().find(close)
                if at >= 0:
                    self._emit(self._held[:at], thinking=True)
                    self._inside, self._held = None, self._held[at + len(close):]
                    continue
            keep = _partial_tag_suffix(self._held)
            self._emit(self._held[:len(self._held) - keep], thinking=self._inside is not None)
            self._held = self._held[len(self._held) - keep:]
            return

    def flush(self) -> None:
        """At the end of the stream: what was held back was not a tag after all."""
        held, self._held = self._held, ""
        self._emit(held, thinking=self._inside is not None)

    def _emit(self, text: str, thinking: bool) -> None:
        target = self.on_thinking if thinking else self.on_answer
        if text and target is not None:
            target(text)


def _partial_tag_suffix(text: str) -> int:
    """Length of the longest end of `text` that could begin a <tag> or </tag> (so it is held for the next delta)."""
    start = text.rfind("<")
    if start < 0 or len(text) - start > len("</thinking>"):
        return 0
    tail = text[start:].lower()
    for name in _TAGS:
        for tag in (f"<{name}>", f"</{name}>"):
            if tag.startswith(tail):
                return len(tail)
    return 0
