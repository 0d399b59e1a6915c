"""A run as the app sees it: the store's event log folded into per-iteration state.

Pure Python (no streamlit), one fold function per event kind. The live view and the replay of a stored run both
build this state from `store.events(run_id, after_seq=...)`, so a finished run is shown by exactly the code that
showed it live; polling only folds the events that arrived since the last poll.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kforge_core.store import EventKind

# Events shown in the run's activity log (run-level facts); the others belong to an iteration's detail tabs.
FEED_KINDS = frozenset({
    EventKind.RUN_CREATED, EventKind.PASS_STARTED, EventKind.ITERATION_FINISHED, EventKind.BEST_UPDATED,
    EventKind.RUN_FINISHED, EventKind.RUN_INTERRUPTED, EventKind.RUN_RESUMED, EventKind.CANCEL_REQUESTED,
    EventKind.HEAD_TO_HEAD, EventKind.SLOWER_THAN_BASELINE,
})
# Folded only (the latest one is shown as the running evaluation's stage), never listed: dozens per iteration.
FOLD_ONLY_KINDS = frozenset({EventKind.EVAL_STAGE})


@dataclass
class IterationState:
    index: int
    pass_name: str | None = None
    events: list[dict] = field(default_factory=list)  # this iteration's events in seq order (tokens merged)
    status: str | None = None  # verdict status or "no_program"; None while it is being worked on
    reason: str = ""
    finished: bool = False
    code: str | None = None
    language: str = "python"
    candidate_ms: float | None = None
    eager_ms: float | None = None
    compiled_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compiled: float | None = None
    has_diff: bool = False
    has_profile: bool = False
    has_recommendations: bool = False
    stage: str | None = None  # the running evaluation's latest stage ("checking seed 2/5"), None once finished
    warnings: list[str] = field(default_factory=list)  # its verdict's warnings (noisy timings among them)


@dataclass
class RunState:
    run_id: str
    last_seq: int = 0
    iterations: dict[int, IterationState] = field(default_factory=dict)
    passes: list[dict] = field(default_factory=list)  # [{"pass", "max_iterations", "first_iteration"}]
    current_pass: str | None = None
    feed: list[dict] = field(default_factory=list)  # run-level events (FEED_KINDS, and errors outside iterations)
    created: dict | None = None
    best: dict | None = None
    finished: dict | None = None
    last_event: dict | None = None
    tokens_prompt: int = 0
    tokens_completion: int = 0
    cost: float | None = None  # the calls' own costs, each at its agent's price when it was made; None: none priced
    # [start ts, end ts or None] per working session (created / each resume, until finished or interrupted): the
    # run's wall time leaves out the idle time between a cancel and a resume
    sessions: list[list] = field(default_factory=list)
    stage: str | None = None  # a run-level evaluation's stage (the final head-to-head), None once finished
    slower: dict | None = None  # the run's end said its best loses to a baseline (`slower_than_baseline` data)
    contest: dict | None = None  # the end-of-run head-to-head (`head_to_head` data), where the best's numbers came from

    def iteration(self, index: int) -> IterationState:
        it = self.iterations.get(index)
        if it is None:
            it = self.iterations[index] = IterationState(index=index, pass_name=self.current_pass)
            for p in self.passes:
                if p["pass"] == self.current_pass and p["first_iteration"] is None:
                    p["first_iteration"] = index
        return it

    @property
    def ordered(self) -> list[IterationState]:
        return [self.iterations[i] for i in sorted(self.iterations)]

    @property
    def streaming(self) -> dict | None:
        """The tokens event being written right now (the newest event is streamed text), else None."""
        last = self.last_event
        return last if last is not None and last["kind"] == EventKind.TOKENS else None


Fold = Callable[[RunState, dict, "IterationState | None"], None]
FOLDS: dict[str, Fold] = {}


def folds(*kinds: str) -> Callable[[Fold], Fold]:
    def register(fn: Fold) -> Fold:
        for kind in kinds:
            FOLDS[str(kind)] = fn
        return fn
    return register


def event_iteration(event: dict) -> int | None:
    """The iteration an event belongs to: the store's column, else the loop's `iteration` field."""
    if event.get("iteration") is not None:
        return event["iteration"]
    data = event.get("data") or {}
    value = data.get("iteration", data.get("index") if event["kind"] == EventKind.ITERATION_FINISHED else None)
    return value if isinstance(value, int) else None


def apply(state: RunState, events: list[dict]) -> RunState:
    """Fold new events (seq > state.last_seq, in seq order) into `state`; returns it."""
    for event in events:
        if event["seq"] <= state.last_seq:
            continue  # already folded (a poll that overlapped the previous one)
        index = event_iteration(event)
        it = state.iteration(index) if index is not None else None
        fold = FOLDS.get(event["kind"])
        if fold is not None:
            fold(state, event, it)
        if event["kind"] in FOLD_ONLY_KINDS:
            pass
        elif event["kind"] in FEED_KINDS or (it is None and event["kind"] == EventKind.ERROR):
            state.feed.append(event)
        elif it is not None:
            _append_merging_tokens(it.events, event)
        state.last_seq = event["seq"]
        state.last_event = event
    return state


def _stream_of(event: dict) -> tuple:
    """Which stream a tokens event belongs to: its agent, and whether it is the model's thinking or its answer."""
    data = event["data"] or {}
    return data.get("agent"), bool(data.get("thinking"))


def _append_merging_tokens(events: list[dict], event: dict) -> None:
    """Consecutive `tokens` events of one agent are one stream: keep them as a single event with the joined text."""
    if event["kind"] == EventKind.TOKENS and events:
        last = events[-1]
        if last["kind"] == EventKind.TOKENS and _stream_of(last) == _stream_of(event):
            merged = dict(last, data={**last["data"], "text": last["data"].get("text", "") +
                                      (event["data"] or {}).get("text", "")}, seq=event["seq"])
            events[-1] = merged
            return
    events.append(dict(event))


# --------------------------------------------------------------------------------------------------- folds

@folds(EventKind.RUN_CREATED)
def _run_created(state: RunState, event: dict, it: IterationState | None) -> None:
    state.created = event["data"]
    state.sessions.append([event.get("ts"), None])


def _end_session(state: RunState, event: dict) -> None:
    if state.sessions and state.sessions[-1][1] is None:
        state.sessions[-1][1] = event.get("ts")


@folds(EventKind.PASS_STARTED)
def _pass_started(state: RunState, event: dict, it: IterationState | None) -> None:
    name = event["data"].get("pass")
    state.current_pass = name
    if not any(p["pass"] == name for p in state.passes):
        state.passes.append({"pass": name, "max_iterations": event["data"].get("max_iterations"),
                             "first_iteration": None})


@folds(EventKind.PROGRAM_EXTRACTED)
def _program(state: RunState, event: dict, it: IterationState | None) -> None:
    if it is not None:
        it.code = event["data"].get("code")
        it.language = event["data"].get("language") or "python"


@folds(EventKind.PROGRAM_MISSING)
def _missing(state: RunState, event: dict, it: IterationState | None) -> None:
    if it is not None:
        it.status, it.reason = "no_program", event["data"].get("error") or "the reply held no program"


@folds(EventKind.DIFF)
def _diff(state: RunState, event: dict, it: IterationState | None) -> None:
    if it is not None:
        it.has_diff = bool(event["data"].get("unified_diff"))


@folds(EventKind.VERDICT)
def _verdict(state: RunState, event: dict, it: IterationState | None) -> None:
    verdict = event["data"].get("verdict") or {}
    if it is not None:
        it.status, it.reason = verdict.get("status"), verdict.get("reason") or ""
        for key in ("candidate_ms", "eager_ms", "compiled_ms", "speedup_vs_eager", "speedup_vs_compiled"):
            if verdict.get(key) is not None:
                setattr(it, key, verdict[key])
        it.warnings = [str(w) for w in verdict.get("warnings") or []]


@folds(EventKind.EVAL_STAGE)
def _stage(state: RunState, event: dict, it: IterationState | None) -> None:
    text = str(event["data"].get("stage") or "")
    if it is None:
        state.stage = text
    elif not it.finished:
        it.stage = text


@folds(EventKind.HEAD_TO_HEAD)
def _head_to_head(state: RunState, event: dict, it: IterationState | None) -> None:
    state.stage = None
    state.contest = event["data"]


@folds(EventKind.TIMINGS)
def _timings(state: RunState, event: dict, it: IterationState | None) -> None:
    if it is not None:
        for key in ("candidate_ms", "eager_ms", "compiled_ms", "speedup_vs_eager", "speedup_vs_compiled"):
            if event["data"].get(key) is not None:
                setattr(it, key, event["data"][key])


@folds(EventKind.PROFILE)
def _profile(state: RunState, event: dict, it: IterationState | None) -> None:
    if it is not None:
        it.has_profile = True


@folds(EventKind.RECOMMENDATIONS)
def _recommendations(state: RunState, event: dict, it: IterationState | None) -> None:
    if it is not None:
        it.has_recommendations = bool(event["data"].get("recommendations") or event["data"].get("text"))


@folds(EventKind.ITERATION_FINISHED)
def _iteration_finished(state: RunState, event: dict, it: IterationState | None) -> None:
    if it is None:
        return
    data = event["data"]
    it.finished = True
    it.stage = None
    it.status = data.get("status") or it.status
    it.reason = data.get("reason") or it.reason
    it.pass_name = data.get("pass") or it.pass_name
    for key in ("candidate_ms", "speedup_vs_eager", "speedup_vs_compiled"):
        if data.get(key) is not None:
            setattr(it, key, data[key])


@folds(EventKind.BEST_UPDATED)
def _best(state: RunState, event: dict, it: IterationState | None) -> None:
    state.best = event["data"]
    state.slower = None  # said of an earlier best (a resumed run's): the next end says it again if still true


@folds(EventKind.SLOWER_THAN_BASELINE)
def _slower(state: RunState, event: dict, it: IterationState | None) -> None:
    state.slower = event["data"]


@folds(EventKind.USAGE)
def _usage(state: RunState, event: dict, it: IterationState | None) -> None:
    data = event["data"]
    state.tokens_prompt = data.get("tokens_prompt", state.tokens_prompt)
    state.tokens_completion = data.get("tokens_completion", state.tokens_completion)
    if isinstance(data.get("cost"), (int, float)):
        state.cost = (state.cost or 0.0) + float(data["cost"])


@folds(EventKind.RUN_FINISHED)
def _finished(state: RunState, event: dict, it: IterationState | None) -> None:
    state.finished = event["data"]
    _end_session(state, event)


@folds(EventKind.RUN_INTERRUPTED)
def _interrupted(state: RunState, event: dict, it: IterationState | None) -> None:
    _end_session(state, event)


@folds(EventKind.RUN_RESUMED)
def _resumed(state: RunState, event: dict, it: IterationState | None) -> None:
    state.finished = None
    _end_session(state, event)
    state.sessions.append([event.get("ts"), None])


def chart_points(state: RunState) -> list[dict[str, Any]]:
    """One row per iteration for the chart: times, speedups, status, pass."""
    return [dict(index=it.index, pass_name=it.pass_name, status=it.status, finished=it.finished,
                 candidate_ms=it.candidate_ms, eager_ms=it.eager_ms, compiled_ms=it.compiled_ms,
                 speedup_vs_eager=it.speedup_vs_eager, speedup_vs_compiled=it.speedup_vs_compiled, reason=it.reason)
            for it in state.ordered]


def collapse_repeats(feed: list[dict]) -> list[dict]:
    """The activity log with runs of iterations that ended the same way (status and reason) folded into one entry:
    its `data` gains `first_index` and `repeats`, so "#3–#5 no program (×3): the same reason" reads once."""
    out: list[dict] = []
    for event in feed:
        prev = out[-1] if out else None
        if (prev is not None and event["kind"] == prev["kind"] == EventKind.ITERATION_FINISHED
                and all((event["data"] or {}).get(k) == (prev["data"] or {}).get(k) for k in ("status", "reason"))
                and (event["data"] or {}).get("status") != "correct"):
            data = dict(prev["data"])
            data.setdefault("first_index", data.get("index"))
            data["repeats"] = data.get("repeats", 1) + 1
            data["index"] = (event["data"] or {}).get("index")
            out[-1] = dict(event, data=data)
        else:
            out.append(event)
    return out
