"""Renderers of an iteration's Model I/O tab: the prompts, the streamed answers, retries and token usage."""

from __future__ import annotations

import streamlit as st

from kforge_core.store import EventKind

from .formatting import fmt_tokens, untrusted
from .highlight import plain_html
from .render_registry import TAIL_CHARS, RenderContext, _html, renders


# Model I/O keeps the conversation in the order it happened: prompt, streamed answer, usage; then the next call.
@renders(EventKind.PROMPT_SENT, tab="Model I/O", order=10)
def prompt_sent(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    messages = d.get("messages") or []
    st.markdown(f"**Prompt to the {d.get('agent', '')} agent** · `{d.get('model') or 'built-in'}` · "
                f"{len(messages)} message{'s' if len(messages) != 1 else ''}")
    for m in messages:
        content = m.get("content")
        images = 0
        if isinstance(content, list):
            texts = []
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    texts.append(part.get("text", ""))
                elif isinstance(part, dict):
                    images += 1
            content = "\n\n".join(texts)
        text = str(content or "")
        label = f"{m.get('role', '?')} · {len(text):,} characters" + (f" · {images} image(s)" if images else "")
        with st.expander(label):
            _html(plain_html(text))


@renders(EventKind.TOKENS, tab="Model I/O", order=10)
def tokens(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    text = d.get("text") or ""
    agent = d.get("agent") or "generation"
    if ctx.compact:
        tail = text[-TAIL_CHARS:]
        if len(text) > len(tail):
            tail = "…" + tail[tail.find("\n") + 1:]
        _html(plain_html(tail).replace('class="kf-code kf-log"', 'class="kf-code kf-log kf-stream"'))
        return
    if d.get("thinking"):  # reasoning_content or <think>: not the answer, kept folded
        with st.expander(f"Thinking of the {agent} agent ({len(text):,} characters, as streamed)"):
            _html(plain_html(text))
        return
    st.markdown(f"**Output of the {agent} agent** ({len(text):,} characters, as streamed)")
    _html(plain_html(text))


@renders(EventKind.RETRY, tab="Model I/O", order=10)
def retry(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    if d.get("where") == "loop":
        what = f"waiting {d.get('delay_s', 0):.0f} s before the next step (endpoint failure {d.get('attempt')} in a row)"
    else:
        what = f"retrying in {d.get('delay_s', 0):.1f} s (attempt {(d.get('attempt') or 0) + 1})"
    st.warning(f"Model endpoint ({d.get('agent')}): {untrusted(d.get('error', ''))} — {what}",
               icon=":material/refresh:")


@renders(EventKind.USAGE, tab="Model I/O", order=10)
def usage(event: dict, ctx: RenderContext) -> None:
    d = event["data"]
    took = f" in {d['latency_s']:.1f} s" if isinstance(d.get("latency_s"), (int, float)) else ""
    estimated = " (estimated)" if d.get("estimated") else ""
    failed = " by a call that broke" if d.get("failed") else ""
    cost = f" · {d['cost']:.4f} (at the agent's price)" if isinstance(d.get("cost"), (int, float)) else ""
    st.caption(f"{fmt_tokens(d.get('prompt_tokens'))} prompt + {fmt_tokens(d.get('completion_tokens'))} completion "
               f"tokens{estimated}{failed}{took}{cost}")
    if d.get("warning"):
        st.warning(d["warning"], icon=":material/warning:")
