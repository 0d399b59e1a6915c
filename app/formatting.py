"""How numbers, statuses and times read in the app: one place, so every page says the same thing the same way."""

from __future__ import annotations

import datetime as dt
import html
import re

from kforge_core.formatting import fmt_ms, fmt_x

__all__ = ["fmt_ms", "fmt_x", "fmt_tokens", "fmt_cost", "fmt_duration", "fmt_when", "parse_ts", "VERDICT_STYLE",
           "RUN_STYLE", "verdict_badge", "run_badge", "verdict_icon", "slowdown_delta",
           "speedup_md", "untrusted", "model_markdown"]

# verdict / iteration status -> (short label, streamlit colour, material icon)
VERDICT_STYLE: dict[str, tuple[str, str, str]] = {
    "correct": ("correct", "green", "check_circle"),
    "incorrect": ("wrong output", "orange", "error"),
    "compile_error": ("build failed", "red", "build"),
    "runtime_error": ("crashed", "red", "bug_report"),
    "timeout": ("timed out", "violet", "timer_off"),
    "rejected": ("rule broken", "gray", "block"),
    "no_program": ("no program", "gray", "code_off"),
    "cancelled": ("cancelled", "gray", "stop_circle"),
    "running": ("running", "blue", "progress_activity"),
}

RUN_STYLE: dict[str, tuple[str, str, str]] = {
    "queued": ("queued", "gray", "schedule"),
    "running": ("running", "blue", "progress_activity"),
    "succeeded": ("succeeded", "green", "check_circle"),
    "failed": ("failed", "red", "cancel"),
    "unsupported": ("unsupported", "gray", "block"),
    "cancelled": ("cancelled", "orange", "stop_circle"),
    "interrupted": ("interrupted", "violet", "pause_circle"),
}


def verdict_icon(status: str | None) -> str:
    label, colour, icon = VERDICT_STYLE.get(status or "running", (status or "?", "gray", "help"))
    return f":{colour}[:material/{icon}:]"


def verdict_badge(status: str | None) -> str:
    label, colour, icon = VERDICT_STYLE.get(status or "running", (status or "?", "gray", "help"))
    return f":{colour}-badge[:material/{icon}: {label}]"


def run_badge(status: str | None, best_speedup_vs_eager: float | None = None) -> str:
    """The run's status as a badge; a succeeded run whose best program is slower than eager PyTorch is not a green
    success: it reads "correct, but slower than eager"."""
    if status == "succeeded" and best_speedup_vs_eager is not None and best_speedup_vs_eager < 1.0:
        return ":orange-badge[:material/slow_motion_video: correct, but slower than eager]"
    label, colour, icon = RUN_STYLE.get(status or "", (status or "?", "gray", "help"))
    return f":{colour}-badge[:material/{icon}: {label}]"


def slowdown_delta(speedup: float | None, baseline: str) -> dict:
    """`st.metric` keyword arguments that mark a speedup below 1x as the slowdown it is (red, arrow down, in
    words); nothing for a gain or an unknown speedup. A value like "0.74x" alone reads as a number, not a loss."""
    if speedup is None or speedup >= 1.0:
        return {}
    return {"delta": f"{1 / speedup:.2f}x slower than {baseline}", "delta_color": "red", "delta_arrow": "down"}


def speedup_md(speedup: float | None) -> str:
    """A speedup in markdown: bold, and red with the slowdown in words below 1x."""
    if speedup is not None and speedup < 1.0:
        return f":red[**{fmt_x(speedup)}** ({1 / speedup:.2f}x slower)]"
    return f"**{fmt_x(speedup)}**"


def fmt_tokens(n: int | None) -> str:
    if not n:
        return "0"
    if n < 10_000:
        return f"{n:,}"
    if n < 1_000_000:
        return f"{n / 1e3:.1f}k"
    return f"{n / 1e6:.2f}M"


def fmt_cost(prompt_tokens: int | None, completion_tokens: int | None, prompt_price_per_1m: float | None,
             completion_price_per_1m: float | None) -> str | None:
    """The run's cost when the user set both prices (Settings); None otherwise: an unknown price is not zero."""
    if prompt_price_per_1m is None or completion_price_per_1m is None:
        return None
    cost = (prompt_tokens or 0) / 1e6 * prompt_price_per_1m + (completion_tokens or 0) / 1e6 * completion_price_per_1m
    return f"{cost:.4f}" if cost < 1 else f"{cost:.2f}"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, s = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {s:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def parse_ts(ts: str | None) -> dt.datetime | None:
    if not ts:
        return None
    try:
        return dt.datetime.fromisoformat(ts)
    except ValueError:
        return None


def fmt_when(ts: str | None) -> str:
    """Local time, short: today's runs show the time only."""
    moment = parse_ts(ts)
    if moment is None:
        return "—"
    local = moment.astimezone()
    if local.date() == dt.datetime.now().astimezone().date():
        return local.strftime("%H:%M:%S")
    return local.strftime("%Y-%m-%d %H:%M")


# A candidate's errors and printed output, a model's recommendations, an endpoint's error, a profile's kernel names:
# text nobody at KForge wrote, shown inside markdown (some of it with unsafe_allow_html). Made inert: no HTML
# element (escaped: no <img> either, nor an <http://...> autolink), no link or image written in markdown (a remote
# image is fetched by the user's browser), no Streamlit directive (`:red[...]`; `:red` alone, its brackets
# escaped, still became an empty coloured span and lost its word: every ":" is escaped), no LaTeX, no block
# structure (folded to one line: headings, quotes, lists and tables start a line). Emphasis and code spans are
# left: they only change how the same characters look. Streamlit also makes links of bare URLs and e-mail
# addresses whatever their escapes (checked in Chromium): a word joiner (U+2060, invisible) after "http:", "www"
# and "@" keeps them text.
_MARKDOWN_ACTIVE = re.compile(r"([\\\[\]$:])")
_BARE_LINK = re.compile(r"(?i)(?<=[a-z])(\\:)(?=//)|(?<![\w.])(www)(?=\.)|(@)")
WORD_JOINER = "\u2060"


def _inert(text: str) -> str:
    s = _MARKDOWN_ACTIVE.sub(r"\\\1", html.escape(text, quote=False))
    return _BARE_LINK.sub(lambda m: m.group(0) + WORD_JOINER, s)


_BLOCK_START = re.compile(r"^\s*(\d+(?=[.)])|(?=[#+\-*|=]))")  # before a block's first mark: "# h", "- x", "12. x"


def untrusted(text, limit: int | None = None, lines: bool = False) -> str:
    """`text` as literal characters in a markdown element: on one line, or with `lines` its own lines kept (each a
    hard line break, none starting a block); cut to `limit` characters, with "…"."""
    raw = str(text if text is not None else "")
    parts = [" ".join(line.split()) for line in raw.splitlines()] if lines else [" ".join(raw.split())]
    s = "\n".join(parts)
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return "  \n".join(_BLOCK_START.sub(r"\g<0>\\", _inert(line)) for line in s.split("\n"))


_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.S)


def model_markdown(text) -> str:
    """A model's markdown (an analysis, a recommended change) with its structure and code kept, made inert as
    `untrusted` makes text: no HTML, no link or image, no directive, no LaTeX outside its code spans and blocks
    (inside them every character is shown as it is)."""
    parts = _CODE.split(str(text or ""))
    for i in range(0, len(parts), 2):
        parts[i] = _inert(parts[i])
    return "".join(parts)
