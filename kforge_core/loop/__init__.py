"""The synthesis loop and its runs: the public API the CLI and the app use.

    config = RunConfig(problem_source=src, problem_name="relu", target="cpu", model="qwen2.5-coder",
                       base_url="http://localhost:8000/v1")
    with open_store(db) as store:
        run_id = create_run(store, config)            # queued; the config is stored minus secrets
    execute_run(db, run_id, config, on_event=print)   # here (the CLI), writing every event to the store
    pid = launch_worker(db, run_id, config)           # or detached (the app): survives the UI going away
    cancel_run(db, run_id)                            # the worker stops at its next check point
    resume_run(db, run_id, config)                    # an interrupted run continues from its last iteration
    run_id = create_manual_run(store, src, "relu", "cpu", author="ada")  # a person's versions (the Workbench)
    launch_manual_job(db, run_id, "evaluate", program)                    # judged in a detached worker

Where things live (this package):
    config.py     RunConfig (documented fields, units in names; `to_record()` drops secrets)
    events.py     the typed events and their stored payloads (the contract the UI renders)
    engine.py     Synthesis: the functional and optimization passes as one generator of events
    steps.py      a step's agent calls (Synthesis' other half)
    judging.py    a program judged: its evaluation, verdict events, the best updated (the start program too)
    records.py    what the events say about a step: excerpts, diffs, applied recommendations, stored prompts
    streaming.py  agent calls in threads, their streamed tokens as events
    feedback.py   what the agents are told about earlier attempts
    types.py      Attempt, LoopState, Next, Cancelled and the loop's constants
    state.py      a run as the store holds it: the state to resume from, the summary the CLI prints
    runs.py       create / execute / resume / cancel / launch_worker; the recorder and the heartbeat
    manual.py     manual runs: a person's versions evaluated (and analysed) by the loop's own judging
    worker.py     `python -m kforge_core.loop.worker`, the detached process
The agents the loop drives live in `kforge_core.agents`.
"""

from .config import RunConfig
from .engine import Synthesis
from .events import (
    ALL_EVENTS, BestUpdated, CompileLog, Diff, ErrorReported, IterationFinished, IterationStarted, LoopEvent,
    PassStarted, ProfileReady, ProgramExtracted, ProgramMissing, PromptSent, RecommendationsReady, RunFinished,
    Timings, Tokens, UsageRecorded, VerdictReady)
from .manual import create_manual_run, launch_manual_job
from .runs import StoreRecorder, cancel_run, config_for_worker, create_run, execute_run, launch_worker, resume_run
from .state import restore_state, summarize_run
from .types import CANCELLED_ITERATION_STATUS, Attempt, Cancelled, LoopState, Next

__all__ = [
    "RunConfig", "create_run", "create_manual_run", "launch_manual_job", "execute_run", "launch_worker", "resume_run", "cancel_run", "summarize_run",
    "config_for_worker", "restore_state", "Synthesis", "LoopState", "Attempt", "Next", "Cancelled",
    "CANCELLED_ITERATION_STATUS", "StoreRecorder", "ALL_EVENTS", "LoopEvent", "PassStarted", "IterationStarted",
    "PromptSent", "Tokens", "ProgramExtracted", "ProgramMissing", "Diff", "CompileLog", "VerdictReady", "Timings",
    "ProfileReady", "RecommendationsReady", "ErrorReported", "UsageRecorded", "IterationFinished", "BestUpdated",
    "RunFinished",
]
