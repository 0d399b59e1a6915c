"""KForge's Streamlit app: the router. Run it with `streamlit run app/main.py`.

Builds the navigation over the page scripts in the top-level `pages/` folder (not a `pages/` folder beside this file:
Streamlit would auto-discover that one, and a direct visit to a sub-page on a fresh server would skip this script),
injects the shared styles, and runs the selected page. Pages read the run store; runs execute in worker processes.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # streamlit puts app/ on sys.path; the app imports `app.*` and `kforge_core.*`
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app.navigation import PAGES  # noqa: E402
from app.services import start_target_discovery  # noqa: E402
from app.styles import inject_styles  # noqa: E402

# The favicon is a file of ours: a material icon as page_icon makes the browser fetch it from fonts.gstatic.com.
st.set_page_config(page_title="KForge", page_icon=str(ROOT / "assets" / "kforge_icon.png"), layout="wide")
inject_styles()
start_target_discovery()  # in the background; pages that need the targets wait for it
pages = [st.Page(spec.path, title=spec.title, icon=spec.icon, url_path=spec.url_path, default=(i == 0))
         for i, spec in enumerate(PAGES)]
selected = st.navigation(pages, position="top")
selected.run()
