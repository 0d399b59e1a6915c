"""Run store concurrency with real OS processes: a fresh file opened at once by several, two writers
appending, a reader polling while a writer writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from kforge_core.store import RunStore, open_store
from kforge_core.store.migrations import KNOWN
from tests.store_fixtures import applied, make_run, seqs, store  # noqa: F401 - pytest fixtures


REPO = Path(__file__).resolve().parents[1]


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
