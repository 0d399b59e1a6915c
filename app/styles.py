"""The app's stylesheet (assets/style/kforge.css) and the pygments colours, injected once per page run."""

from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st

from .highlight import style_css

CSS_FILE = Path(__file__).resolve().parent.parent / "assets" / "style" / "kforge.css"


@functools.lru_cache(maxsize=1)
def _css() -> str:
    return CSS_FILE.read_text(encoding="utf-8") + "\n" + style_css()


def inject_styles() -> None:
    # A st.html holding only a <style> element takes no space on the page.
    st.html(f"<style>{_css()}</style>")
