"""Run store tests: real SQLite files in tmp_path, real OS processes for concurrency."""

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
from sqlite_utils import Database, Migrations

from kforge_core.errors import KForgeError
from kforge_core.store import (EVENT_KINDS, STORE_OWNED_KINDS, InvalidTransition, InvalidValue, IterationNotFound,
                               RunNotFound, RunStore, SchemaTooNew, open_store, pid_alive, resolve_db_path)
from kforge_core.store.db import connect
from kforge_core.store.migrations import KNOWN, MIGRATION_SET, MIGRATIONS, m001_initial, migrate

REPO = Path(__file__).resolve().parents[1]
LOOP_KINDS = sorted(EVENT_KINDS - set(STORE_OWNED_KINDS))


@pytest.fixture
def store(tmp_path: Path):
    with open_store(tmp_path / "runs.db") as s:
        yield s


def make_run(store: RunStore, name: str = "matmul", target: str = "cpu", **kw) -> str:
    return store.create_run(name, f"# source of {name}\n", target, **kw)


def seqs(events: list[dict]) -> list[int]:
    return [e["seq"] for e in events]


def schema(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                            "WHERE name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()


# --- subprocess helpers -----------------------------------------------------------------------------------------

# Each writer prints "ready", waits for the go-file (so all writers really overlap), then appends.
WRITER = r"""
import os, sys, time
from kforge_core.store import open_store
path, run_id, tag, n, go = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
with open_store(path) as store:
    if run_id == "new":
        run_id = store.create_run("p-" + tag, "src", "cpu")
    print("ready", run_id, flush=True)
    while not os.path.exists(go):
        time.sleep(0.002)
    for i in range(n):
        store.append_event(run_id, "diff", {"writer": tag, "i": i})
"""


def spawn_writers(db: Path, go: Path, jobs: list[tuple[str, str, int]]) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), run_id, tag, str(n), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for run_id, tag, n in jobs]
    for p in procs:
        line = p.stdout.readline()
        assert line.startswith("ready"), p.stderr.read()
        p.run_id = line.split()[1]
    return procs


def wait_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err


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


# --- events -------------------------------------------------------------------------------------------------------


def test_events_ordering_and_polling(store: RunStore):
    r, other = make_run(store), make_run(store)
    assert store.last_seq(r) == 1  # run_created
    got = [store.append_event(r, kind, {"n": i}, iteration=i % 3) for i, kind in enumerate(LOOP_KINDS)]
    store.append_event(other, "diff", {"other": True})
    assert got == list(range(2, 2 + len(LOOP_KINDS)))
    events = store.events(r)
    assert seqs(events) == list(range(1, 2 + len(LOOP_KINDS)))
    assert [e["kind"] for e in events[1:]] == LOOP_KINDS and events[3]["iteration"] == 2
    assert events[1]["data"] == {"n": 0}
    assert all(a["ts"] <= b["ts"] for a, b in zip(events, events[1:]))

    cursor = 5
    assert seqs(store.events(r, after_seq=cursor)) == list(range(6, 2 + len(LOOP_KINDS)))
    assert store.events(r, after_seq=store.last_seq(r)) == []
    assert seqs(store.events(r, after_seq=2, limit=3)) == [3, 4, 5]
    assert [e["kind"] for e in store.events(r, kinds=["verdict", "diff"])] == ["diff", "verdict"]
    assert store.events(r, kinds=[]) == []
    assert store.append_event(r, "error") == 2 + len(LOOP_KINDS)  # data defaults to {}
    assert store.events(r)[-1]["data"] == {}

    with pytest.raises(InvalidValue, match="unknown event kind"):
        store.append_event(r, "token", {})
    for kind, method in STORE_OWNED_KINDS.items():
        with pytest.raises(InvalidValue, match=method):
            store.append_event(r, kind, {})


def test_token_buffer_flush_semantics(store: RunStore):
    r = make_run(store)
    now = [100.0]
    clock = lambda: now[0]  # noqa: E731 - a fake clock for deterministic time flushes

    buf = store.token_buffer(r, iteration=3, extra={"agent": "generation"}, max_chars=10, max_interval_s=1.0,
                             clock=clock)
    assert buf.write("abc") is None and buf.write("def") is None  # 6 chars, no time passed
    assert buf.pending == "abcdef" and store.last_seq(r) == 1
    seq = buf.write("ghij")  # reaches 10 chars
    assert seq == 2 and buf.pending == ""
    (ev,) = store.events(r, after_seq=1)
    assert (ev["kind"], ev["iteration"], ev["data"]) == ("tokens", 3, {"agent": "generation", "text": "abcdefghij"})

    assert buf.write("k") is None
    now[0] += 0.6
    assert buf.write("l") is None  # oldest buffered char has waited 0.6 s
    now[0] += 0.5
    assert buf.write("m") == 3  # ... now 1.1 s: time flush, even though only 3 chars
    assert store.events(r)[-1]["data"]["text"] == "klm"
    now[0] += 5.0
    assert buf.write("n") is None  # the interval counts from the oldest *unflushed* char, not the last flush
    assert buf.flush() == 4 and buf.flush() is None and buf.write("") is None
    assert buf.write("x" * 25) == 5  # one oversized chunk is one event, not split
    assert store.events(r)[-1]["data"]["text"] == "x" * 25

    with pytest.raises(RuntimeError):
        with store.token_buffer(r, max_chars=1000, clock=clock) as tail:
            tail.write("partial ")
            tail.write("output")
            raise RuntimeError("stream broke")
    assert store.events(r)[-1]["data"] == {"text": "partial output"}  # flushed on the way out
    assert [e["data"]["text"] for e in store.events(r, kinds=["tokens"])] == \
        ["abcdefghij", "klm", "n", "x" * 25, "partial output"]
    with pytest.raises(InvalidValue):
        store.token_buffer(r, extra={"text": "clash"})


# --- migrations ---------------------------------------------------------------------------------------------------


def applied(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute(
            "SELECT name FROM _sqlite_migrations WHERE migration_set = ? ORDER BY id", [MIGRATION_SET])]


def test_migrations_idempotent(tmp_path: Path):
    path = tmp_path / "runs.db"
    for _ in range(3):
        open_store(path).close()
    assert applied(path) == KNOWN and KNOWN[0] == "m001_initial"
    db = connect(path)
    assert migrate(db) == []
    db.close()


@pytest.mark.parametrize("stop_before", KNOWN)
def test_upgrade_from_each_older_schema(tmp_path: Path, stop_before: str):
    """A database left at any earlier migration upgrades to exactly the schema of a fresh one."""
    fresh, old = tmp_path / "fresh.db", tmp_path / "old.db"
    open_store(fresh).close()
    with Database(old) as db:
        MIGRATIONS.apply(db, stop_before=stop_before)
    with open_store(old) as s:
        make_run(s)
    assert schema(old) == schema(fresh)
    assert applied(old) == KNOWN


def test_upgrade_keeps_data_and_newer_schema_is_refused(tmp_path: Path):
    """Simulate the next release: the current schema plus a future migration, applied to a populated file."""
    path = tmp_path / "runs.db"
    with open_store(path) as s:
        r = make_run(s, config={"k": 1})
        s.start_iteration(r, 0, "functional")
        s.finish_iteration(r, 0, "correct", code="c")
        s.append_event(r, "diff", {"d": "+x"})

    future = Migrations(MIGRATION_SET)
    future()(m001_initial)

    @future()
    def m002_future_column(db: Database) -> None:
        db["runs"].add_column("gpu_name", str)

    db = connect(path)
    assert migrate(db, future) == ["m002_future_column"]
    assert migrate(db, future) == []  # idempotent
    row = db.execute("SELECT gpu_name, config FROM runs WHERE id = ?", [r]).fetchone()
    assert row == (None, '{"k":1}')
    assert db.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", [r]).fetchone()[0] == 3
    db.close()

    with pytest.raises(SchemaTooNew, match="m002_future_column"):
        open_store(path)


# --- concurrency (real OS processes) ------------------------------------------------------------------------------


def test_concurrent_first_open_of_a_fresh_file(tmp_path: Path):
    """Several processes racing to create, switch to WAL and migrate the same new file."""
    db, go = tmp_path / "fresh.db", tmp_path / "go"
    procs = spawn_writers(db, go, [("new", f"w{i}", 5) for i in range(4)])
    go.touch()
    wait_all(procs)
    assert applied(db) == KNOWN
    with open_store(db) as s:
        runs = s.list_runs()
        assert sorted(r["id"] for r in runs) == sorted(p.run_id for p in procs)
        assert all(seqs(s.events(r["id"])) == list(range(1, 7)) for r in runs)


def test_two_processes_append_concurrently(store: RunStore, tmp_path: Path):
    a, b, shared = make_run(store), make_run(store), make_run(store)
    n = 300
    go = tmp_path / "go"
    procs = spawn_writers(Path(store.path), go, [(a, "A", n), (b, "B", n), (shared, "S1", n), (shared, "S2", n)])
    go.touch()
    wait_all(procs)

    for run_id, writers in ((a, ["A"]), (b, ["B"]), (shared, ["S1", "S2"])):
        events = store.events(run_id)
        # seq is dense: no gaps, no duplicates, despite the concurrent writers
        assert seqs(events) == list(range(1, 2 + n * len(writers)))
        for tag in writers:  # and each writer's own events kept their order
            assert [e["data"]["i"] for e in events if e["data"].get("writer") == tag] == list(range(n))
    dupes = store.db.execute("SELECT COUNT(*) FROM (SELECT run_id, seq FROM events GROUP BY 1, 2 "
                             "HAVING COUNT(*) > 1)").fetchone()[0]
    assert dupes == 0


def test_reader_polls_while_writer_writes(store: RunStore, tmp_path: Path):
    r = make_run(store)
    n = 400
    go = tmp_path / "go"
    (writer,) = spawn_writers(Path(store.path), go, [(r, "W", n)])
    go.touch()
    seen: list[dict] = []
    polls_with_news = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        finished = writer.poll() is not None  # checked before polling, so the last poll sees every event
        batch = store.events(r, after_seq=seen[-1]["seq"] if seen else 0)
        polls_with_news += bool(batch)
        seen += batch
        if finished:
            break
    wait_all([writer])
    assert seqs(seen) == list(range(1, n + 2))
    assert [e["data"]["i"] for e in seen[1:]] == list(range(n))
    assert polls_with_news > 1  # the reader really saw the log grow while it was written


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
