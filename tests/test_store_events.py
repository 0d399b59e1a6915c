"""Run store events: ordering, polling from a sequence number, the token buffer's flushes (real SQLite files
in tmp_path).
"""

from __future__ import annotations

import pytest

from kforge_core.store import EVENT_KINDS, STORE_OWNED_KINDS, InvalidValue, RunStore
from tests.store_fixtures import make_run, seqs, store  # noqa: F401 - pytest fixtures


LOOP_KINDS = sorted(EVENT_KINDS - set(STORE_OWNED_KINDS))


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
