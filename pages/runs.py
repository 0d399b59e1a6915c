"""Runs: the history of every run in the store, with filters; open any run in the same view that showed it live."""

from __future__ import annotations

import streamlit as st

from app import services
from app.formatting import RUN_STYLE, fmt_ms, fmt_tokens, fmt_when, fmt_x, run_badge, speedup_md
from app.navigation import page_path
from app.run_view import agent_label
from kforge_core.errors import KForgeError

PAGE_SIZE = 25

st.title("Runs")
st.caption(f"Every synthesis run in `{services.db_path()}` (set `KFORGE_DB` to use another file). Runs go on in "
           "their own worker processes whether or not a page shows them.")

try:
    with services.store() as s:
        interrupted = s.mark_interrupted_runs()  # runs whose worker died show as interrupted (resumable)
        targets_seen = sorted({r["target"] for r in s.list_runs(limit=1000)})
except KForgeError as exc:
    st.error(f"Could not open the run store: {exc}", icon=":material/database:")
    st.stop()
if interrupted:
    st.info(f"{len(interrupted)} run(s) lost their worker process and are now marked interrupted; open one to "
            "resume it.", icon=":material/pause_circle:")

f1, f2, f3 = st.columns([2, 2, 3])
statuses = f1.multiselect("Status", list(RUN_STYLE), key="kf-runs-status", persist_state="session",
                          format_func=lambda s: RUN_STYLE[s][0], placeholder="any status")
target = f2.selectbox("Target", ["any"] + targets_seen, key="kf-runs-target", persist_state="session")
search = f3.text_input("Search", key="kf-runs-search", persist_state="session",
                       placeholder="problem, model, agent or run id")
filters = dict(status=statuses or None, target=None if target == "any" else target, search=search.strip() or None)

with services.store() as s:
    total = s.count_runs(**filters)
    pages = max(1, -(-total // PAGE_SIZE))
    page = 1
    if pages > 1:
        page = st.number_input(f"Page (of {pages})", 1, pages, 1, key="kf-runs-page")
    runs = s.list_runs(**filters, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)

if not runs:
    st.info("No run matches." if total == 0 and any(filters.values()) else
            "No runs yet: start one on the Synthesize page.", icon=":material/history:")
    st.page_link(page_path("synthesize"), label="Synthesize a kernel", icon=":material/bolt:")
    st.stop()

st.caption(f"{total} run{'s' if total != 1 else ''}" + (f", page {page} of {pages}" if pages > 1 else ""))
WIDTHS = [3, 1.3, 3, 1.4, 1.5, 1.2, 1.4, 1]
header = st.columns(WIDTHS, vertical_alignment="center")
for col, name in zip(header, ["Problem", "Target", "Agent / model", "Status", "Best speedup", "Tokens",
                              "Started"]):
    col.markdown(f"**{name}**")
for run in runs:
    st.html("<div class='kf-row-sep'></div>")
    cols = st.columns(WIDTHS, vertical_alignment="center")
    cols[0].markdown(f"**{run['problem_name']}**  \n<span class='kf-when'>{run['id']}</span>",
                     unsafe_allow_html=True)
    cols[1].markdown(f"`{run['target']}`")
    cols[2].markdown(agent_label(run))
    cols[3].markdown(run_badge(run["status"], run.get("best_speedup_vs_eager")),
                     help=run["error"] if run.get("error") else None)
    best = run.get("best_speedup_vs_eager")
    cols[4].markdown(f"{speedup_md(best)} vs eager  \n<span class='kf-when'>{fmt_ms(run.get('best_candidate_ms'))}, "
                     f"{fmt_x(run.get('best_speedup_vs_compiled'))} vs compile</span>" if best is not None else "—",
                     unsafe_allow_html=True)
    tokens = (run.get("tokens_prompt") or 0) + (run.get("tokens_completion") or 0)
    cols[5].markdown(fmt_tokens(tokens) if tokens or run.get("agent") not in ("builtin", "manual") else "—")
    cols[6].markdown(fmt_when(run["created_at"]))
    cols[7].page_link(page_path("synthesize"), label="Open", icon=":material/open_in_new:",
                      query_params={"run": run["id"]})
