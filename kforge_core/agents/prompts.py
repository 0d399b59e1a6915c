"""Prompt templates: loading (`assets/prompts/`, overridable per file through `$KFORGE_PROMPTS_DIR`), rendering
(stdlib `string.Template`: `${slot}`, `$$` for a dollar sign) and the assembly of the two agents' messages.

The template files are the editable part (wording, order, emphasis); this module only decides which optional
sections appear and formats data (feedback, recommendations, measurements) as text. An unknown slot in a template
raises `PromptTemplateError` at once: a half-rendered prompt would silently cost a model call.
"""

from __future__ import annotations

import json
import os
import string
from dataclasses import dataclass
from pathlib import Path

from ..errors import KForgeError
from ..llm.tokens import estimate_prompt_tokens, estimate_tokens
from ..platform import REPO_ROOT
from ..profiling import kernel_label
from ..eval.rules import RULES
from .base import AnalysisRequest, Feedback, GenerationRequest, Recommendation

PROMPTS_DIR = REPO_ROOT / "assets" / "prompts"
ENV_PROMPTS_DIR = "KFORGE_PROMPTS_DIR"

# Bounds on what one prompt carries, in characters (a compiler can print megabytes; a model reads ~4 chars/token).
MAX_LOG_CHARS = 4000
MAX_REASON_CHARS = 2000


class PromptTemplateError(KForgeError):
    """A template file is missing or uses a slot its renderer does not fill."""


def template_path(name: str) -> Path:
    """The file used for template `name`: $KFORGE_PROMPTS_DIR/name when it exists, else assets/prompts/name."""
    override = os.environ.get(ENV_PROMPTS_DIR)
    if override:
        candidate = Path(override).expanduser() / name
        if candidate.is_file():
            return candidate
    return PROMPTS_DIR / name


def load_template(name: str) -> string.Template:
    path = template_path(name)
    try:
        return string.Template(path.read_text())
    except OSError as e:
        raise PromptTemplateError(f"cannot read prompt template {path}: {e.strerror or e}") from None


def render(name: str, **values: object) -> str:
    """Render template `name` with `values` (each converted with str)."""
    template = load_template(name)
    try:
        return template.substitute({k: str(v) for k, v in values.items()})
    except KeyError as e:
        raise PromptTemplateError(f"prompt template {template_path(name)} uses the slot ${{{e.args[0]}}}, which "
                                  f"is not filled here; available: {', '.join(sorted(values))}") from None
    except ValueError as e:  # a lone "$" in the template
        raise PromptTemplateError(f"prompt template {template_path(name)}: {e} (write $$ for a dollar sign)") from None


# ----------------------------------------------------------------------------------------------- generation


def rules_text(platform_module: str = "", candidate_api: tuple[str, ...] | list[str] = ()) -> str:
    """The rules as bullets, with the imports rule naming this target's module and helpers (the generic
    "platforms.<target>" wording next to a target-specific line read as two different rules)."""
    api = ", ".join(candidate_api)
    lines = []
    for rule in RULES:
        summary = rule.summary
        if platform_module and "platforms.<target>" in summary:
            summary = summary.replace("from platforms.<target> import ...", f"from {platform_module} import "
                                                                           f"{api or '(nothing)'}")
        lines.append(f"- {summary}")
    return "\n".join(lines)


@dataclass(frozen=True)
class _Clip:
    """Bounds on the parts of a prompt that can grow without limit, in characters (one level of clipping)."""

    log: int
    reason: int
    reference: int | None  # None: whole; 0: left out
    recommendation: int
    history: int  # entries
    example: bool = True


# Tried in order until the prompt fits its budget; the first is what a prompt carries when room is plenty.
CLIP_LEVELS = (
    _Clip(log=MAX_LOG_CHARS, reason=MAX_REASON_CHARS, reference=None, recommendation=1200, history=12),
    _Clip(log=2500, reason=1000, reference=12000, recommendation=600, history=6),
    _Clip(log=800, reason=400, reference=3000, recommendation=300, history=3),
    _Clip(log=300, reason=200, reference=0, recommendation=160, history=1, example=False),
)


def generation_messages(request: GenerationRequest, budget_tokens: int | None = None) -> list[dict]:
    """The system and user messages for one generation call, clipped to fit `budget_tokens` (estimated prompt
    tokens; None: no bound). What is clipped first: compiler logs, reasons, the reference program, the
    recommendations, the history; last the example. The problem and the program being fixed are never cut."""
    messages: list[dict] = []
    for clip in CLIP_LEVELS:
        messages = _generation_messages(request, clip)
        if budget_tokens is None or estimate_prompt_tokens(messages) <= budget_tokens:
            return messages
    return messages


def _generation_messages(request: GenerationRequest, clip: _Clip) -> list[dict]:
    spec = request.spec
    api = ", ".join(spec.candidate_api) or "(nothing)"
    system = render("generation_system.md", platform_title=spec.title, kernel_language=spec.kernel_language,
                    platform_module=spec.module, candidate_api=api)
    task = render("generation_task.md", problem_name=request.problem_name, platform_title=spec.title,
                  kernel_language=spec.kernel_language)
    # Once the program fed back is correct on this target (the optimization pass), it shows the format better than
    # the example, and the reference has done its job: both would only cost tokens (~40 % of such a prompt).
    in_target_format = request.pass_name == "optimization" and request.previous_program is not None
    example = ""
    if clip.example and not in_target_format:
        example = render("generation_example.md", platform_title=spec.title,
                         example_problem=spec.example_problem.strip("\n"),
                         example_candidate=spec.example_candidate.strip("\n"))
    reference = ""
    if request.reference_program and not in_target_format and clip.reference != 0:
        reference = render("generation_reference.md", reference_target=request.reference_target or "another target",
                           reference_program=_clip_middle(request.reference_program.strip("\n"), clip.reference))
    previous = ""
    if request.previous_program is not None or request.feedback is not None:
        feedback = format_feedback(request.feedback, clip) if request.feedback else "(not evaluated)"
        previous = render("generation_previous.md", previous_label=_previous_label(request),
                          previous_program=(request.previous_program or "(no program)").strip("\n"),
                          feedback=feedback)
    if request.feedback and request.feedback.recommendations:
        previous += render("generation_recommendations.md",
                           recommendations=format_recommendations(request.feedback.recommendations,
                                                                  clip.recommendation))
    rules = render("generation_rules.md", rules=rules_text(spec.module, spec.candidate_api),
                   platform_module=spec.module, candidate_api=api)
    instruction_name = ("generation_instruction_optimization.md" if request.pass_name == "optimization"
                        else "generation_instruction_functional.md")
    instruction = render(instruction_name, platform_title=spec.title)
    evaluation = f"\n## How it is judged\n\n{request.evaluation.strip()}\n" if request.evaluation.strip() else ""
    user = render("generation_user.md", task=task, example=example, problem=request.problem_source.strip("\n"),
                  evaluation=evaluation, reference=reference, previous=previous, rules=rules,
                  instruction=instruction)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def continuation_message() -> dict:
    return {"role": "user", "content": render("generation_continue.md")}


def _previous_label(request: GenerationRequest) -> str:
    if request.pass_name == "optimization":
        return "The fastest correct program so far"
    if request.previous_program is None:
        return "Your previous reply"
    return "Your previous program"


def format_feedback(feedback: Feedback, clip: _Clip = CLIP_LEVELS[0]) -> str:
    """What the last evaluation said, as text for the model: the verdict, the log, the timings, and in the
    optimization pass the program's profile, its roofline and the changes tried so far."""
    reason = _clip(feedback.reason, clip.reason)
    headline = {
        "compile_error": f"It did not compile: {reason}",
        "runtime_error": f"It failed at run time: {reason}",
        "incorrect": f"It ran, but its output is wrong: {reason}",
        "timeout": f"It did not finish in time: {reason}",
        "rejected": f"The evaluator rejected it (a rule was broken): {reason}",
        "no_program": f"The reply held no usable program: {reason}",
        "correct": f"It is correct: {reason}",
    }.get(feedback.status, f"{feedback.status}: {reason}")
    parts = [headline]
    if feedback.compile_log.strip():
        label = "Compiler output" if feedback.status == "compile_error" else "Output"
        parts.append(f"{label} (line numbers refer to the program as shown above):\n\n```\n"
                     f"{_clip_log(feedback.compile_log.strip(), clip.log)}\n```")
    timings = format_timings(feedback.candidate_ms, feedback.eager_ms, feedback.compiled_ms)
    if timings:
        parts.append("Timings:\n" + timings)
    if feedback.profile:
        parts.append("Profile of this program:\n" + format_profile(feedback.profile))
    if feedback.roofline:
        parts.append("Roofline: " + format_roofline(feedback.roofline))
    if feedback.history and clip.history:
        shown = feedback.history[-clip.history:]
        older = len(feedback.history) - len(shown)
        lines = [f"- {_clip(h, 300)}" for h in shown]
        parts.append("Changes tried so far and what they measured" + (f" (the last {len(shown)}; {older} "
                                                                       "earlier)" if older else "") + ":\n"
                     + "\n".join(lines))
    return "\n\n".join(parts)


def format_timings(candidate_ms: float | None, eager_ms: float | None, compiled_ms: float | None) -> str:
    if candidate_ms is None:
        return ""
    lines = [f"- your program: {candidate_ms:.4g} ms (median)"]
    if eager_ms is not None:
        lines.append(f"- PyTorch eager: {eager_ms:.4g} ms (speedup {eager_ms / candidate_ms:.2f}x)")
    if compiled_ms is not None:
        lines.append(f"- torch.compile: {compiled_ms:.4g} ms (speedup {compiled_ms / candidate_ms:.2f}x)")
    return "\n".join(lines)


def format_recommendations(recommendations: list[Recommendation], limit: int | None = None) -> str:
    lines = []
    for n, r in enumerate(recommendations, 1):
        line = f"{n}. **{r.title}**: {r.change}"
        if r.why:
            line += f" Why: {r.why}"
        if r.expected_gain:
            line += f" Expected gain: {r.expected_gain}."
        lines.append(_clip(line, limit) if limit else line)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- analysis


def analysis_messages_text(request: AnalysisRequest, budget_tokens: int | None = None) -> tuple[str, str]:
    """(system text, user text) for the analysis agent; screenshots are attached by the agent as image parts.
    Clipped like the generation prompt to fit `budget_tokens`: the history first, then the profile's extras."""
    system, user = "", ""
    for clip in CLIP_LEVELS:
        system, user = _analysis_texts(request, clip)
        if budget_tokens is None or estimate_tokens(system) + estimate_tokens(user) <= budget_tokens:
            break
    return system, user


def _analysis_texts(request: AnalysisRequest, clip: _Clip) -> tuple[str, str]:
    spec = request.spec
    api = ", ".join(spec.candidate_api) or "(nothing)"
    system = render("analysis_system.md", platform_title=spec.title, rules=rules_text(spec.module, spec.candidate_api),
                    platform_module=spec.module, candidate_api=api)
    timings = format_timings(request.candidate_ms, request.eager_ms, request.compiled_ms) or "(not measured)"
    history = ""
    if request.history and clip.history:
        shown = request.history[-clip.history * 2:]
        history = "\n## Changes tried so far and their measured effect\n\n" + "\n".join(
            f"- {_clip(_history_line(h), 400)}" for h in shown) + "\n"
    screenshots = ""
    if request.screenshots:
        screenshots = (f"\n{len(request.screenshots)} profiler screenshot(s) are attached; read them for what the "
                       f"summary above does not show. {request.screenshots_note}".rstrip() + "\n")
    evaluation = f"\n## How it is judged\n\n{request.evaluation.strip()}\n" if request.evaluation.strip() else ""
    user = render("analysis_user.md", problem=request.problem_source.strip("\n"), program=request.program.strip("\n"),
                  timings=timings, profile=format_profile(request.profile, 3000 if clip.example else 600),
                  roofline=format_roofline(request.roofline), history=history, screenshots=screenshots,
                  evaluation=evaluation)
    return system, user


def _history_line(entry: dict) -> str:
    tried = entry.get("tried") or "a change"
    outcome = entry.get("outcome") or entry.get("status") or "unknown"
    return f"iteration {entry.get('iteration')}: {tried} -> {outcome}"


def format_profile(profile: dict | None, extras_chars: int = 3000) -> str:
    if not profile:
        return "(no profile: this target has no profiler adapter, or profiling failed)"
    if profile.get("error"):
        return f"(profiling failed: {profile['error']})"
    lines = []
    head = [f"tool {profile.get('tool', '?')}"]
    if profile.get("per_forward_ms") is not None:
        head.append(f"{profile['per_forward_ms']:.4g} ms per forward")
    if profile.get("custom_share") is not None:
        head.append(f"{100 * profile['custom_share']:.0f}% of the time in custom kernels")
    if profile.get("launches_per_forward") is not None:
        head.append(f"{profile['launches_per_forward']:.3g} custom-kernel launches per forward")
    lines.append(", ".join(head))
    for k in profile.get("kernels") or []:
        tag = " (custom)" if k.get("custom") else ""
        lines.append(f"- {kernel_label(k)}{tag}: {k.get('ms_per_forward', 0):.4g} ms per forward, "
                     f"{100 * (k.get('share') or 0):.0f}% of the time, {k.get('calls_per_forward', 0):.3g} calls")
    for note in profile.get("notes") or []:
        lines.append(f"- note: {note}")
    known = {"tool", "device", "per_forward_ms", "kernels", "custom_share", "launches_per_forward", "notes"}
    extras = {k: v for k, v in profile.items() if k not in known}
    if extras:  # platform extras (e.g. "ncu" metrics) go through as compact JSON
        lines.append("platform details: " + _clip(json.dumps(extras, default=str), extras_chars))
    return "\n".join(lines)


def format_roofline(roofline: dict | None) -> str:
    if not roofline:
        return "(unknown)"
    parts = []
    if roofline.get("bytes") is not None:
        parts.append(f"{roofline['bytes'] / 1e6:.3g} MB moved at least once")
    if roofline.get("flops"):
        parts.append(f"{roofline['flops'] / 1e6:.3g} MFLOP")
    if roofline.get("bandwidth_gbs"):
        parts.append(f"measured bandwidth {roofline['bandwidth_gbs']:.3g} GB/s")
    if roofline.get("fp32_tflops"):
        parts.append(f"measured fp32 peak {roofline['fp32_tflops']:.3g} TFLOP/s")
    if roofline.get("floor_ms"):
        parts.append(f"{roofline.get('bound') or '?'}-bound floor {roofline['floor_ms']:.4g} ms")
    if roofline.get("pct_of_roofline") is not None:
        pct = roofline["pct_of_roofline"]
        parts.append(f"the program runs at {pct:.0f}% of the roofline" if pct >= 1 else
                     f"the program runs at {pct:.2g}% of the roofline")
        if roofline.get("pct_of_roofline_device") is not None:
            parts.append(f"its kernels alone at {roofline['pct_of_roofline_device']:.0f}% (device time "
                         f"{roofline['device_ms']:.4g} ms per forward; the rest is host launch work)")
    else:
        parts.append("% of roofline unknown (device ceilings not measured)")
    if roofline.get("suspicious"):
        parts.append(roofline["suspicious"])
    if roofline.get("ceilings_label"):
        parts.append(roofline["ceilings_label"])  # a ceiling's date and trust travel with every figure built on it
    return "; ".join(parts)


def _clip(text: str, limit: int) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip_middle(text: str, limit: int | None) -> str:
    """Keep both ends of a program (imports and setup; ModelNew at the end), cut from the middle."""
    if limit is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n# … ({len(text) - 2 * half} characters cut to fit the model's context) …\n{text[-half:]}"


def _clip_log(text: str, limit: int) -> str:
    """Keep the head of a log: a compiler's first errors are the real ones, later ones mostly follow from them."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit} more characters cut)"
