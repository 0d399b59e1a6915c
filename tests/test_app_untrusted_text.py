"""Text nobody at KForge wrote, shown in the run view: a candidate's error and output (verdict reasons, error
messages, the judge's stages, a profile's tool and notes), a model's words (recommendations, the analysis in full)
and a misbehaving endpoint's error. Written into a real run store with markup in every such field, then the page
rendered (AppTest) on every iteration and tab: no element carries it as markup (an <img> with a handler, a remote
image, a link, a Streamlit colour directive, LaTeX), and the words themselves are still shown."""

from __future__ import annotations

import re

import pytest

from app.formatting import model_markdown, untrusted
from app.render_registry import TABS
from kforge_core.store import open_store
from tests.browser.appkit import app, app_env, texts, use_targets  # noqa: F401,F811 - pytest fixtures
from tests.browser.seed import HOSTILE_TEXT as PAYLOAD
from tests.browser.seed import seed_hostile_text_run

# what each would look like left as markup in an element's markdown (escaped, a bracket follows a backslash)
ACTIVE = [re.compile(p) for p in (r"<img", r"(?<!\\)\]\(http://evil\.example", r":red\[FORGED", r"\$\\pi\$")]


def _live(text: str) -> list[str]:
    return [a.pattern for a in ACTIVE if a.search(text)]


def _elements(at) -> list[tuple[bool, str]]:
    """(is markdown, source) of every markdown-bearing element (markdown, captions, alerts) and every st.html
    body (HTML: markdown syntax there is plain text, only its tags count)."""
    out = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "title", "subheader"):
        out += [(True, str(e.value)) for e in getattr(at, kind)]
    return out + [(False, str(e.proto.body)) for e in at.get("html")]


def test_text_from_candidates_models_and_endpoints_is_never_markup(app_env, use_targets):
    with open_store() as store:
        run_id = seed_hostile_text_run(store)
    at = app(run=run_id).run()
    assert not at.exception
    seen = set()
    for index in (0, 1):
        at.button(key=f"kf-it:{run_id}:{index}").click().run()
        for tab in TABS:
            at.session_state[f"kf-tabs:{run_id}"] = tab
            at.run()
            assert not at.exception, at.exception
            for markdown, body in _elements(at):
                if "FORGED" in body or "evil.example" in body:
                    seen.add(body)
                    live = _live(body) if markdown else [p for p in ("<img",) if p in body]
                    assert not live, (live, body[:600])
    page = "\n".join(seen)
    # the words are shown (escaped), from each kind of source
    for word in ("the candidate raised", "RuntimeError", "endpoint said", "tool", "note", "title", "why",
                 "change", "not decided", "the run failed", "stopped"):
        assert re.search(rf"{word}\b[^\n]*FORGED", page), word
    assert "\\# not a heading" in page and "\\- not a list" in page  # kept as lines, none a block
    assert "keep [this](as code) <b>" in page  # a model's code block as it wrote it


@pytest.mark.parametrize("text", [PAYLOAD, "a\n# b\n12. c\n> d", "x " * 200])
def test_untrusted_is_literal_and_one_line(text):
    out = untrusted(text, limit=120)
    assert "\n" not in out and len(out) <= 200
    assert not _live(out), out
    assert untrusted("swish_bias 2.5 ms (a*b)") == "swish_bias 2.5 ms (a*b)"  # plain text reads the same
    assert untrusted("line 12:37: see http://x.y") == "line 12\\:37\\: see http\\:\u2060//x.y"


def test_model_markdown_keeps_code_and_structure():
    out = model_markdown("## Plan\n- use `a[i](j)` and [docs](http://evil.example)\n```\n<b>[x](y)</b>\n```")
    assert out.startswith("## Plan\n- use `a[i](j)`")  # headings, lists and code spans stay
    assert "\\[docs\\](http\\:\u2060//evil.example)" in out and "```\n<b>[x](y)</b>\n```" in out
