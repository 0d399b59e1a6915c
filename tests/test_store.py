"""Run store tests: opening and paths, runs and their lifecycle, iterations, interrupted runs (real SQLite files in
tmp_path; events, migrations and concurrency have files of their own).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kforge_core.errors import KForgeError
from kforge_core.store import (
    InvalidTransition, InvalidValue, IterationNotFound, RunNotFound, RunStore, open_store, pid_alive, resolve_db_path)
from tests.store_fixtures import make_run, store  # noqa: F401 - pytest fixtures


# --- opening, pragmas, paths --------------------------------------------------------------------------------------


def test_open_creates_dirs_and_sets_pragmas(tmp_path: Path):
    path = tmp_path / "a" / "b" / "runs.db"
    with open_store(path) as s:
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert s.db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    # WAL is a property of the file: a plain connection sees it too.
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_db_path_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KFORGE_DB", raising=False)
    assert resolve_db_path() == tmp_path / "home" / ".local/share/kforge/runs.db"
    monkeypatch.setenv("KFORGE_DB", str(tmp_path / "env.db"))
    assert resolve_db_path() == tmp_path / "env.db"
    assert resolve_db_path(tmp_path / "explicit.db") == tmp_path / "explicit.db"
    with open_store() as s:
        assert s.path == str(tmp_path / "env.db")


def test_store_refuses_use_from_another_thread(store: RunStore):
    errors: list[BaseException] = []

    def use() -> None:
        try:
            store.list_runs()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    t = threading.Thread(target=use)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], sqlite3.ProgrammingError)


# --- runs ---------------------------------------------------------------------------------------------------------


def test_create_get_list_filter(store: RunStore):
    a = make_run(store, "matmul", "cpu", model="m-1")
    b = make_run(store, "softmax", "cuda", agent="builtin")
    c = make_run(store, "conv_100%", "cuda", model="m-2")
    store.start_run(b, pid=os.getpid())

    run = store.get_run(a)
    assert run["status"] == "queued" and run["problem_source"] == "# source of matmul\n"
    assert run["agent"] == "llm" and run["model"] == "m-1" and run["tokens_prompt"] == 0
    assert len(a) == 12 and int(a, 16) >= 0
    assert dt.datetime.fromisoformat(run["created_at"]).utcoffset() == dt.timedelta(0)

    assert [r["id"] for r in store.list_runs()] == [c, b, a]  # newest first
    assert "problem_source" not in store.list_runs()[0]
    assert [r["id"] for r in store.list_runs(status="running")] == [b]
    assert [r["id"] for r in store.list_runs(status=["queued", "running"], target="cuda")] == [c, b]
    assert [r["id"] for r in store.list_runs(search="SOFT")] == [b]
    assert [r["id"] for r in store.list_runs(search="100%")] == [c]
    assert store.list_runs(search="0_%") == []  # LIKE wildcards in the search are literal
    assert [r["id"] for r in store.list_runs(search="m-")] == [c, a]
    assert [r["id"] for r in store.list_runs(limit=1, offset=1)] == [b]
    assert store.count_runs() == 3 and store.count_runs(target="cuda") == 2 and store.count_runs(status=[]) == 0


def test_update_run_and_json_round_trip(store: RunStore):
    config = {"budgets": {"functional": 5, "optimization": 10}, "tags": ["a", "é"], "ratio": 0.5, "none": None}
    r = make_run(store, config=config)
    assert store.get_run(r)["config"] == config
    store.update_run(r, eager_ms=2.5, compiled_ms=1.5, config={"x": [1, {"y": math.nan}], "z": math.inf})
    run = store.get_run(r)
    assert (run["eager_ms"], run["compiled_ms"]) == (2.5, 1.5)
    # Non-finite floats are stored as strings so that the column stays valid JSON.
    assert run["config"] == {"x": [1, {"y": "NaN"}], "z": "Infinity"}
    assert store.db.execute("SELECT json_valid(config) FROM runs WHERE id = ?", [r]).fetchone()[0] == 1
    assert run["updated_at"] >= run["created_at"]

    store.start_iteration(r, 0, "functional")
    verdict = {"status": "incorrect", "max_abs_diff": math.nan, "shapes": [[2, 3]]}
    profile = {"kernels": [{"name": "k", "ms": 0.1}]}
    recommendations = ["tile", "vectorize"]
    store.finish_iteration(r, 0, "incorrect", verdict=verdict, profile=profile, recommendations=recommendations)
    it = store.get_iteration(r, 0)
    assert it["verdict"] == {"status": "incorrect", "max_abs_diff": "NaN", "shapes": [[2, 3]]}
    assert (it["profile"], it["recommendations"]) == (profile, recommendations)

    with pytest.raises(InvalidValue):
        store.append_event(r, "diff", {"path": Path("/x")})
    with pytest.raises(InvalidValue):
        store.update_run(r, not_a_column=1)
    with pytest.raises(InvalidValue):
        store.update_run(r, id="other")
    with pytest.raises(InvalidValue):
        store.update_run(r, status="exploded")


def test_unknown_run_raises_typed_error(store: RunStore):
    calls = [
        lambda s: s.get_run("nope"), lambda s: s.update_run("nope", error="x"), lambda s: s.events("nope"),
        lambda s: s.append_event("nope", "diff", {}), lambda s: s.iterations("nope"),
        lambda s: s.start_iteration("nope", 0, "functional"), lambda s: s.heartbeat("nope", 1),
        lambda s: s.request_cancel("nope"), lambda s: s.cancel_requested("nope"), lambda s: s.delete_run("nope"),
        lambda s: s.last_completed_iteration("nope"), lambda s: s.add_usage("nope", 1, 1),
        lambda s: s.set_best("nope", 0, speedup_vs_eager=1.0), lambda s: s.finish_run("nope", "failed"),
        lambda s: s.token_buffer("nope"), lambda s: s.get_iteration("nope", 0),
    ]
    for call in calls:
        with pytest.raises(RunNotFound) as info:
            call(store)
        assert info.value.run_id == "nope"
        assert isinstance(info.value, LookupError) and isinstance(info.value, KForgeError)
    assert store.list_runs() == []  # nothing half-written


def test_run_lifecycle_and_transitions(store: RunStore):
    r = make_run(store)
    with pytest.raises(InvalidTransition):
        store.resume_run(r)
    store.start_run(r, pid=4242)
    assert store.get_run(r)["worker_pid"] == 4242 and store.get_run(r)["status"] == "running"
    with pytest.raises(InvalidTransition):
        store.start_run(r)
    store.heartbeat(r, 4243)
    assert store.get_run(r)["worker_pid"] == 4243 and store.get_run(r)["heartbeat_at"]
    store.start_iteration(r, 0, "functional")
    store.finish_iteration(r, 0, "correct", candidate_ms=1.0)
    store.set_best(r, 0, speedup_vs_eager=3.0, speedup_vs_compiled=1.5, candidate_ms=1.0)
    with pytest.raises(IterationNotFound):
        store.set_best(r, 7, speedup_vs_eager=9.0)
    store.add_usage(r, 100, 20, iteration=0, extra={"agent": "generation"})
    store.add_usage(r, 1, 2)
    with pytest.raises(InvalidValue):
        store.finish_run(r, "running")
    store.finish_run(r, "failed", error="budget exhausted")
    run = store.get_run(r)
    assert (run["status"], run["error"], run["best_iteration"], run["best_speedup_vs_eager"]) == \
        ("failed", "budget exhausted", 0, 3.0)
    assert (run["tokens_prompt"], run["tokens_completion"]) == (101, 22) and run["finished_at"]
    with pytest.raises(InvalidTransition):
        store.finish_run(r, "succeeded")

    assert store.resume_run(r, pid=5) == 0
    run = store.get_run(r)
    assert (run["status"], run["error"], run["finished_at"], run["worker_pid"]) == ("running", None, None, 5)

    kinds = [e["kind"] for e in store.events(r)]
    assert kinds == ["run_created", "iteration_finished", "best_updated", "usage", "usage", "run_finished",
                     "run_resumed"]
    usage = store.events(r, kinds=["usage"])
    assert usage[0]["data"] == {"agent": "generation", "prompt_tokens": 100, "completion_tokens": 20,
                                "tokens_prompt": 100, "tokens_completion": 20}
    assert usage[0]["iteration"] == 0 and usage[1]["data"]["tokens_completion"] == 22
    finished = store.events(r, kinds=["run_finished"])[0]["data"]
    assert finished == {"status": "failed", "error": "budget exhausted", "best_iteration": 0,
                        "best_speedup_vs_eager": 3.0, "best_speedup_vs_compiled": 1.5}
    assert store.events(r, kinds=["run_resumed"])[0]["data"] == \
        {"worker_pid": 5, "previous_status": "failed", "from_iteration": 0}


def test_delete_run_cascades(store: RunStore):
    keep, gone = make_run(store), make_run(store)
    for r in (keep, gone):
        store.start_iteration(r, 0, "functional")
        store.append_event(r, "diff", {"d": 1})
    store.delete_run(gone)
    with pytest.raises(RunNotFound):
        store.get_run(gone)
    assert store.db.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", [gone]).fetchone()[0] == 0
    assert store.db.execute("SELECT COUNT(*) FROM iterations WHERE run_id = ?", [gone]).fetchone()[0] == 0
    assert len(store.events(keep)) == 2 and len(store.iterations(keep)) == 1
    with pytest.raises(RunNotFound):
        store.delete_run(gone)


def test_foreign_keys_enforced(store: RunStore):
    with pytest.raises(sqlite3.IntegrityError):
        store.db.execute("INSERT INTO events (run_id, seq, ts, kind, data) VALUES ('ghost', 1, 't', 'diff', '{}')")
    with pytest.raises(sqlite3.IntegrityError):
        store.db.execute("INSERT INTO iterations (run_id, \"index\", pass, started_at) VALUES ('ghost', 0, 'x', 't')")
    # Another connection opened by the store enforces them too (the pragma is per connection).
    with open_store(store.path) as other:
        assert other.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_cancel_round_trip(store: RunStore):
    r = make_run(store)
    assert store.cancel_requested(r) is False
    with open_store(store.path) as ui:  # the UI process asks, the worker's connection sees it
        assert ui.request_cancel(r) is True
        assert ui.request_cancel(r) is False  # idempotent: one event only
    assert store.cancel_requested(r) is True
    assert [e["kind"] for e in store.events(r)] == ["run_created", "cancel_requested"]
    store.finish_run(r, "cancelled")
    store.resume_run(r)
    assert store.cancel_requested(r) is False  # resuming clears the request
    store.finish_run(r, "succeeded")
    assert store.request_cancel(r) is False  # nothing to cancel
    assert store.cancel_requested(r) is False


# --- iterations ---------------------------------------------------------------------------------------------------


def test_iterations(store: RunStore):
    r = make_run(store)
    assert store.last_completed_iteration(r) is None
    store.start_iteration(r, 0, "functional")
    store.update_iteration(r, 0, code="print(1)")
    seq = store.finish_iteration(r, 0, "compile_error", reason="missing ;")
    (ev,) = store.events(r, after_seq=seq - 1)
    assert (ev["kind"], ev["iteration"]) == ("iteration_finished", 0)
    assert ev["data"] == {"index": 0, "pass": "functional", "status": "compile_error", "reason": "missing ;",
                          "candidate_ms": None, "speedup_vs_eager": None, "speedup_vs_compiled": None}
    assert store.get_iteration(r, 0)["code"] == "print(1)"  # kept: finish_iteration's None means "unchanged"
    with pytest.raises(InvalidValue):
        store.finish_iteration(r, 0, "correct")
    with pytest.raises(InvalidValue):
        store.start_iteration(r, 0, "functional")  # finished iterations are immutable

    store.start_iteration(r, 1, "optimization")
    store.update_iteration(r, 1, code="v1", candidate_ms=9.0)
    store.start_iteration(r, 1, "optimization")  # restart of an unfinished one (resume) resets it
    assert store.get_iteration(r, 1)["code"] is None and store.get_iteration(r, 1)["candidate_ms"] is None
    store.finish_iteration(r, 1, "correct", code="v2", candidate_ms=0.5, speedup_vs_eager=2.0)
    store.start_iteration(r, 2, "optimization")
    assert [i["index"] for i in store.iterations(r)] == [0, 1, 2]
    assert store.last_completed_iteration(r) == 1
    assert store.iterations(r)[1]["pass"] == "optimization" and store.iterations(r)[2]["finished_at"] is None

    with pytest.raises(IterationNotFound):
        store.finish_iteration(r, 9, "correct")
    with pytest.raises(IterationNotFound):
        store.update_iteration(r, 9, code="x")
    with pytest.raises(InvalidValue):
        store.start_iteration(r, 3, "warmup")
    with pytest.raises(InvalidValue):
        store.finish_iteration(r, 2, "great")
    with pytest.raises(InvalidValue):
        store.update_iteration(r, 2, started_at="x")


# --- interrupted runs ---------------------------------------------------------------------------------------------


def test_mark_interrupted_runs(store: RunStore):
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()  # reaped: its pid is now dead
    assert not pid_alive(exited.pid) and pid_alive(os.getpid())

    dead = make_run(store, "dead")
    store.start_run(dead, pid=exited.pid)
    stale = make_run(store, "stale")
    store.start_run(stale, pid=os.getpid())
    long_ago = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=10)).isoformat(timespec="microseconds")
    store.update_run(stale, heartbeat_at=long_ago)
    alive = make_run(store, "alive")
    store.start_run(alive, pid=os.getpid())
    store.heartbeat(alive, os.getpid())
    queued = make_run(store, "queued")  # no worker yet, but recent
    done = make_run(store, "done")
    store.start_run(done, pid=exited.pid)
    store.finish_run(done, "succeeded")

    assert sorted(store.mark_interrupted_runs(stale_after_s=60)) == sorted([dead, stale])
    assert store.mark_interrupted_runs(stale_after_s=60) == []  # already handled: no second event
    statuses = {r["id"]: r["status"] for r in store.list_runs()}
    assert statuses == {dead: "interrupted", stale: "interrupted", alive: "running", queued: "queued",
                        done: "succeeded"}
    (ev,) = store.events(dead, kinds=["run_interrupted"])
    assert ev["data"] == {"reason": "worker_dead", "worker_pid": exited.pid, "heartbeat_at": ev["data"]["heartbeat_at"]}
    (ev,) = store.events(stale, kinds=["run_interrupted"])
    assert ev["data"] == {"reason": "heartbeat_stale", "worker_pid": os.getpid(), "heartbeat_at": long_ago}
    assert "gone" in store.get_run(dead)["error"]

    assert store.resume_run(dead) is None  # no completed iteration: start over
    assert store.get_run(dead)["status"] == "running"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombie detection reads procfs")
def test_unreaped_worker_counts_as_dead():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while pid_alive(child.pid) and time.monotonic() < deadline:  # exits, but stays a zombie until wait()
        time.sleep(0.01)
    assert not pid_alive(child.pid)
    child.wait()
