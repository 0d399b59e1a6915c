"""The performance-analysis agent backed by an OpenAI-compatible chat model (multimodal when screenshots are given).

It reads the current best program with its measured facts (timings, the profile summary of `kforge_core.profiling`
with any platform extras, the roofline at the device's measured ceilings) plus optional profiler screenshots, and
returns a short list of `Recommendation`s. The reply is asked for as a JSON list in a fenced block; replies that
ignore that are read as a bulleted or numbered list instead (`parse_recommendations`).

A reply in prose (no list at all) is passed on as one recommendation holding the text itself, clipped: a paragraph
of advice is still guidance for the generation agent. Thinking (`<think>` blocks, `reasoning_content`) is set apart
first and never read as advice.

A model that refuses images (`LLMImagesUnsupportedError`) is asked again once without them; the result carries a
note saying the screenshots were not read, and later calls of this agent leave them out from the start.

The prompt is clipped to the model's context; a context-length refusal is "no recommendations" for this step (the
generation goes on without them), never an error that stops the run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from ..llm import LLMClient, LLMContextError, LLMImagesUnsupportedError, image_message, prompt_budget
from .base import AnalysisRequest, AnalysisResult, Recommendation, TokenSink, Usage
from .extract import fenced_blocks
from .llm_generation import chat_streaming, usage_of
from .prompts import analysis_messages_text
from .thinking import split_thinking

MAX_RECOMMENDATIONS = 6
# A prose reply passed on as one recommendation: this many characters of it.
MAX_PROSE_CHARS = 1500
_KEYS = {  # accepted spellings -> Recommendation field
    "title": "title", "name": "title", "summary": "title", "headline": "title",
    "change": "change", "what": "change", "action": "change", "description": "change", "recommendation": "change",
    "details": "change", "how": "change",
    "why": "why", "reason": "why", "rationale": "why", "evidence": "why", "because": "why",
    "expected_gain": "expected_gain", "gain": "expected_gain", "expected_speedup": "expected_gain",
    "speedup": "expected_gain", "impact": "expected_gain", "expected_impact": "expected_gain",
}


@dataclass
class LLMAnalysisResult(AnalysisResult):
    notes: str = ""  # e.g. "the model rejected the 2 screenshots; analysed without them"
    prompt: list[dict] = field(default_factory=list)  # the messages of the call that answered
    thinking: str = ""  # the model's reasoning, set apart from its answer


class LLMAnalysisAgent:
    reads_device_profiler = True  # Nsight Compute's metrics go into its prompt (prompts.py, platform extras)

    def __init__(self, client: LLMClient, model: str | None = None):
        self.client = client
        self.model = model or client.config.model_for("analysis")
        self.label = f"{self.model} @ {client.config.endpoint}"
        self.images_rejected = False  # learnt from the first refusal; later calls send text only
        self.price_per_mtok = client.config.price_for("analysis")  # (prompt, completion) per 1M tokens, or None

    def prompt(self, request: AnalysisRequest) -> list[dict]:
        """The messages `analyze` sends first (with the screenshots as image parts, unless the model refused)."""
        return self._messages(request, with_images=not self.images_rejected)

    def _messages(self, request: AnalysisRequest, with_images: bool) -> list[dict]:
        if not with_images and request.screenshots:
            request = replace(request, screenshots=[])
        budget = prompt_budget(self.client.context_window(self.model), self.client.config.max_tokens)
        system, user = analysis_messages_text(request, budget)
        return [{"role": "system", "content": system}, image_message(user, request.screenshots)]

    def _chat(self, messages: list[dict], on_token: TokenSink | None):
        return chat_streaming(self.client, messages, self.model, on_token)

    def analyze(self, request: AnalysisRequest, on_token: TokenSink | None = None) -> AnalysisResult:
        notes = []
        messages = self.prompt(request)
        if request.screenshots and self.images_rejected:
            notes.append(f"{len(request.screenshots)} profiler screenshot(s) not sent: model {self.model} does not "
                         "accept images")
        try:
            try:
                result = self._chat(messages, on_token)
            except LLMImagesUnsupportedError as err:
                self.images_rejected = True
                notes.append(f"model {self.model} rejected the {len(request.screenshots)} profiler screenshot(s) "
                             f"({err}); analysed again without them, from the text measurements only")
                messages = self._messages(request, with_images=False)
                result = self._chat(messages, on_token)
        except LLMContextError as err:
            # The generation can go on without advice; the next analysis is clipped to the window just learnt.
            return LLMAnalysisResult(recommendations=[], error=f"no recommendations this step: the analysis prompt "
                                     f"did not fit the model's context ({err})", notes="; ".join(notes),
                                     prompt=messages)
        usage: Usage = usage_of(result)
        thought, answer = split_thinking(result.text)
        recommendations = parse_recommendations(answer)
        error = None
        if not recommendations:
            prose = prose_recommendation(answer)
            if prose is None:
                error = "the analysis reply held no recommendations (expected a JSON list in a ```json block)"
            else:
                recommendations = [prose]
                notes.append("the analysis reply was prose, not a list: its text was passed on as the recommendation")
        return LLMAnalysisResult(recommendations=recommendations, text=answer, usage=usage, error=error,
                                 notes="; ".join(notes), prompt=messages,
                                 thinking="\n".join(t for t in (result.reasoning, thought) if t))


# ------------------------------------------------------------------------------------------------- parsing


def parse_recommendations(text: str) -> list[Recommendation]:
    """Recommendations from a reply: a JSON list (in a fenced block, or bare), else a bulleted/numbered list."""
    for candidate in _json_candidates(text):
        items = _json_items(candidate)
        if items is not None:
            recs = [r for r in (_from_mapping(i) for i in items) if r is not None]
            if recs:
                return recs[:MAX_RECOMMENDATIONS]
    return _from_bullets(text)[:MAX_RECOMMENDATIONS]


def prose_recommendation(text: str) -> Recommendation | None:
    """A reply without any list, as one recommendation carrying its text (code blocks left out, clipped)."""
    kept, in_code = [], False
    for line in (text or "").splitlines():
        if line.strip().startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if not in_code:
            kept.append(line)
    prose = " ".join(" ".join(kept).split())
    if len(prose) < 20:
        return None  # "ok", "none": nothing to pass on
    if len(prose) > MAX_PROSE_CHARS:
        prose = prose[:MAX_PROSE_CHARS - 1].rstrip() + "…"
    return Recommendation(title=_first_sentence(prose), change=prose, why="")


def _json_candidates(text: str) -> list[str]:
    blocks = fenced_blocks(text)
    out = [b.text for b in blocks if b.tag in ("json", "jsonc", "")]
    out += [b.text for b in blocks if b.tag not in ("json", "jsonc", "")]
    start, end = text.find("["), text.rfind("]")
    if 0 <= start < end:
        out.append(text[start:end + 1])
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        out.append(text[start:end + 1])
    return out


def _json_items(candidate: str) -> list | None:
    try:
        data = json.loads(candidate)
    except ValueError:
        # Models often leave a trailing comma; one cheap repair, then give up.
        try:
            data = json.loads(re.sub(r",\s*([\]}])", r"\1", candidate))
        except ValueError:
            return None
    if isinstance(data, dict):
        for key in ("recommendations", "items", "changes", "suggestions"):
            if isinstance(data.get(key), list):
                return data[key]
        return [data] if any(k in _KEYS for k in data) else None
    return data if isinstance(data, list) else None


def _from_mapping(item: object) -> Recommendation | None:
    if isinstance(item, str):
        return _from_line(item)
    if not isinstance(item, dict):
        return None
    fields: dict[str, str] = {}
    for key, value in item.items():
        name = _KEYS.get(str(key).strip().lower().replace(" ", "_").replace("-", "_"))
        if name and name not in fields and value not in (None, ""):
            fields[name] = value if isinstance(value, str) else json.dumps(value)
    if not fields.get("title") and not fields.get("change"):
        return None
    title = fields.get("title") or _first_sentence(fields["change"])
    return Recommendation(title=title.strip(), change=(fields.get("change") or title).strip(),
                          why=fields.get("why", "").strip(), expected_gain=fields.get("expected_gain", "").strip())


_BULLET = re.compile(r"^\s*(?:[-*•+]|\d+[.)])\s+(?P<text>\S.*)$")
_WHY = re.compile(r"\b(?:why|because|reason|rationale)\b\s*[:\-—]?\s*", re.IGNORECASE)
_GAIN = re.compile(r"\b(?:expected(?:\s+gain|\s+speedup|\s+impact)?|gain|impact)\s*[:\-—]\s*(?P<gain>[^.;\n]+)",
                   re.IGNORECASE)


def _from_bullets(text: str) -> list[Recommendation]:
    items: list[str] = []
    in_code = False
    for line in text.splitlines():
        if line.strip().startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code:
            continue
        m = _BULLET.match(line)
        if m and (not line.startswith((" ", "\t")) or not items):
            items.append(m.group("text").strip())
        elif items and line.strip() and line.startswith((" ", "\t")):
            items[-1] += " " + line.strip()  # a wrapped or nested line belongs to the item above
    return [r for r in (_from_line(i) for i in items) if r is not None]


def _from_line(text: str) -> Recommendation | None:
    text = text.strip()
    if len(text) < 8:
        return None
    gain = ""
    m = _GAIN.search(text)
    if m:
        gain = m.group("gain").strip().rstrip(").")
        text = (text[:m.start()] + text[m.end():]).strip()
    bold = re.match(r"^\*\*(?P<title>[^*]+)\*\*\s*[:\-—.]?\s*(?P<rest>.*)$", text)
    if bold:
        title, rest = bold.group("title").strip().rstrip(":"), bold.group("rest").strip()
    elif ":" in text[:80]:
        title, rest = (s.strip() for s in text.split(":", 1))
    else:
        title, rest = _first_sentence(text), text
    why = ""
    w = _WHY.search(rest)
    if w and w.start() > 0:
        why = rest[w.end():].strip()
        rest = rest[:w.start()].strip().rstrip(",;—-").strip()
    title = title.replace("**", "")
    return Recommendation(title=title, change=(rest or title).replace("**", ""), why=why.replace("**", ""),
                          expected_gain=gain)


def _first_sentence(text: str) -> str:
    sentence = re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]
    return sentence if len(sentence) <= 80 else sentence[:77].rstrip() + "..."
