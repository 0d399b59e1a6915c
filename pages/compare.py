"""Compare: two programs from any runs and iterations, side by side, with their diff and their timings.

The URL holds the choice (`?a=<run>:<iteration>&b=<run>:<iteration>`), so a comparison can be shared.
"""

from __future__ import annotations

import difflib

import streamlit as st

from app import services
from app.formatting import fmt_ms, fmt_x, verdict_badge
from app.highlight import side_by_side_diff, to_html
from app.navigation import page_path
from kforge_core.errors import KForgeError

st.title("Compare programs")

try:
    with services.store() as s:
        runs = s.list_runs(limit=300)
except KForgeError as exc:
    st.error(f"Could not open the run store: {exc}", icon=":material/database:")
    st.stop()
if not runs:
    st.info("No runs yet: programs appear here once a run has produced some.", icon=":material/compare_arrows:")
    st.stop()
by_id = {r["id"]: r for r in runs}


def _parse(value: str | None) -> tuple[str | None, int | None]:
    if not value:
        return None, None
    run_id, _, index = value.partition(":")
    try:
        return run_id, int(index) if index not in ("", "None") else None
    except ValueError:
        return run_id, None


def _kind(run: dict) -> str:
    return f"manual by {run.get('author') or 'a person'} · " if run.get("kind") == "manual" else ""


def _iterations(run_id: str) -> list[dict]:
    with services.store() as s:
        return [it for it in s.iterations(run_id) if it.get("code")]


def _pick(side: str, column) -> dict | None:
    run_q, index_q = _parse(st.query_params.get(side))
    with column:
        ids = list(by_id)
        if run_q and run_q not in by_id:
            st.warning(f"Run `{run_q}` is not in this store.")
        run_id = st.selectbox(f"Run {side.upper()}", ids, index=ids.index(run_q) if run_q in by_id else 0,
                              key=f"kf-cmp-run-{side}",
                              format_func=lambda i: f"{by_id[i]['problem_name']} · {by_id[i]['target']} · "
                                                    f"{_kind(by_id[i])}{by_id[i]['status']} · {i}")
        its = _iterations(run_id)
        if not its:
            st.info("This run has no program yet.")
            return None
        indexes = [it["index"] for it in its]
        best = by_id[run_id].get("best_iteration")
        default = index_q if index_q in indexes else best if best in indexes else indexes[-1]
        index = st.selectbox(f"Iteration {side.upper()}", indexes, index=indexes.index(default),
                             key=f"kf-cmp-it-{side}:{run_id}",
                             format_func=lambda i: f"#{i} · {next(x for x in its if x['index'] == i)['status']}"
                                                   + (" · best" if i == best else ""))
        st.query_params[side] = f"{run_id}:{index}"
        st.page_link(page_path("workbench"), label=f"Edit {side.upper()} in Workbench", icon=":material/edit:",
                     query_params={"run": run_id, "iteration": str(index)})
        return {"run": by_id[run_id], **next(it for it in its if it["index"] == index)}


left, right = st.columns(2, gap="medium")
a = _pick("a", left)
if "b" not in st.query_params and a is not None:
    # A sensible default for B: the previous program of the same run.
    earlier = [it["index"] for it in _iterations(a["run"]["id"]) if it["index"] < a["index"]]
    if earlier:
        st.query_params["b"] = f"{a['run']['id']}:{earlier[-1]}"
b = _pick("b", right)
if a is None or b is None:
    st.stop()


def _timing_row(p: dict) -> dict:
    verdict = p.get("verdict") or {}
    return {"program": f"{p['run']['problem_name']} #{p['index']}", "target": p["run"]["target"],
            "status": p.get("status"), "time": fmt_ms(p.get("candidate_ms")),
            "eager": fmt_ms(verdict.get("eager_ms")), "torch.compile": fmt_ms(verdict.get("compiled_ms")),
            "vs eager": fmt_x(p.get("speedup_vs_eager")), "vs compile": fmt_x(p.get("speedup_vs_compiled"))}


st.markdown("##### Timings")
st.dataframe([dict(side="A", **_timing_row(a)), dict(side="B", **_timing_row(b))], hide_index=True, width="stretch")
if a["run"]["target"] != b["run"]["target"]:
    st.caption("The two programs ran on different targets: compare their speedups, not their times.")
elif a.get("candidate_ms") and b.get("candidate_ms"):
    ratio = b["candidate_ms"] / a["candidate_ms"]
    faster, factor = ("A", ratio) if ratio >= 1 else ("B", 1 / ratio)
    st.markdown(f"**{faster}** is **{factor:.2f}×** faster.")
    st.caption("Each program was timed in its own evaluation; each speedup is against eager PyTorch timed in that "
               "same evaluation, so the speedups are the fairer comparison when the machine was busy.")

# The diff reads from the older program to the newer one (within a run: the lower iteration first), so an
# optimization's additions read as additions whichever side was picked as A.
older, newer = (b, a) if (a["run"]["id"] == b["run"]["id"] and b["index"] < a["index"]) else (a, b)
older_label, newer_label = ("B", "A") if older is b else ("A", "B")
tab_diff, tab_side, tab_unified = st.tabs([f"Side-by-side diff ({older_label} → {newer_label})", "Programs",
                                           f"Unified diff ({older_label} → {newer_label})"])
with tab_diff:
    if older["code"] == newer["code"]:
        st.info("The two programs are identical.")
    else:
        st.caption(f"Left: {older_label} ({older['run']['problem_name']} #{older['index']}), right: {newer_label} "
                   f"({newer['run']['problem_name']} #{newer['index']}); green added, yellow changed, red removed; "
                   "unchanged stretches folded.")
        st.html(side_by_side_diff(older["code"], newer["code"]))
with tab_side:
    c1, c2 = st.columns(2, gap="small")
    for column, label, p in ((c1, "A", a), (c2, "B", b)):
        with column:
            st.markdown(f"**{label}**: {p['run']['problem_name']} #{p['index']} {verdict_badge(p.get('status'))}")
            st.html(to_html(p["code"], "python"))
with tab_unified:
    diff = "".join(difflib.unified_diff(
        older["code"].splitlines(True), newer["code"].splitlines(True),
        f"{older_label}_{older['run']['id']}_{older['index']}.py",
        f"{newer_label}_{newer['run']['id']}_{newer['index']}.py"))
    if diff:
        st.html(to_html(diff, "diff", line_numbers=False))
    else:
        st.info("The two programs are identical.")
