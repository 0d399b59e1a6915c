"""The app's pages, in one table: the router (`app/main.py`) builds `st.navigation` from it and components link to
pages through it, so a page's file or URL changes in one place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES_DIR = ROOT / "pages"  # top level, not beside the entrypoint: Streamlit would auto-discover that folder


@dataclass(frozen=True)
class PageSpec:
    key: str
    title: str
    icon: str
    url_path: str

    @property
    def path(self) -> Path:
        return PAGES_DIR / f"{self.key}.py"


PAGES = (
    PageSpec("synthesize", "Synthesize", ":material/bolt:", "synthesize"),
    PageSpec("workbench", "Workbench", ":material/code_blocks:", "workbench"),
    PageSpec("runs", "Runs", ":material/history:", "runs"),
    PageSpec("compare", "Compare", ":material/compare_arrows:", "compare"),
    PageSpec("benchmark", "Benchmark", ":material/leaderboard:", "benchmark"),
    PageSpec("settings", "Settings", ":material/settings:", "settings"),
)
BY_KEY = {p.key: p for p in PAGES}


def page_path(key: str) -> Path:
    return BY_KEY[key].path


def run_url(run_id: str) -> str:
    """A shareable link to a run's view (relative to the app's root, so it works under any base URL path)."""
    # Synthesize is the default page, served at the app's root URL.
    return f"./?run={run_id}"
