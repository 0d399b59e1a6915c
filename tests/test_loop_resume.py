"""Resuming runs: a real worker killed mid-run and resumed from its last finished iteration, resume flags
added to the stored options, the steps an endpoint failure took given back.
"""

from __future__ import annotations

import os
import signal
import time

from kforge_core.loop import RunConfig, create_run, launch_worker, resume_run, summarize_run
from kforge_core.store import open_store
from tests.fakes.openai_replies import server_error, stall
from tests.fakes.openai_server import FakeOpenAIServer
from tests.loop_fixtures import (  # noqa: F401 - pytest fixtures
    PROBLEM, SECRET, db, make_config, no_user_llm_settings, of_kind, program, run_scripted, server, wait_for)


def test_killed_worker_is_resumed_from_its_last_finished_iteration(db, tmp_path):
    """A real `python -m kforge_core.loop.worker`, SIGKILLed while the model streams iteration 1; the run is marked
    interrupted and resumed here, reading its state from the store (nothing finished is redone)."""
    with FakeOpenAIServer(models=("gen-model", "ana-model"), api_key=SECRET) as server:
        server.enqueue_for("gen-model", program("compile_error.py"),
                           stall(program("wrong.py"), after_chunks=4, seconds=120.0))
        # a read timeout longer than the test's wait, so the stalled stream is still open when the kill comes
        config = make_config(server, api_key=SECRET, max_functional_iters=3, llm_options={"timeout_s": 60.0})
        with open_store(db) as store:
            run_id = create_run(store, config)
        pid = launch_worker(db, run_id, config, log_path=tmp_path / "worker.log")
        try:
            with open_store(db) as store:
                wait_for(lambda: of_kind(store.events(run_id), "prompt_sent", iteration=1), timeout_s=120,
                         what=f"the worker to reach iteration 1 (log: {tmp_path / 'worker.log'})")
                wait_for(lambda: len(server.chat_requests) == 2, timeout_s=10, what="the second model call")
                time.sleep(0.3)  # inside the stalled stream
                assert store.get_run(run_id)["status"] == "running"
                assert store.get_run(run_id)["worker_pid"] == pid
        finally:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _reaped(pid), 10, "the killed worker to disappear")

        with open_store(db) as store:
            assert store.mark_interrupted_runs() == [run_id]
            assert store.get_run(run_id)["status"] == "interrupted"
            assert store.last_completed_iteration(run_id) == 0
        server.enqueue_for("gen-model", program("correct_fast.py"))
        status = resume_run(db, run_id, make_config(server, api_key=SECRET, max_functional_iters=3))
        assert status == "succeeded"

    with open_store(db) as store:
        summary, events = summarize_run(store, run_id), store.events(run_id)
    assert [(it["index"], it["status"]) for it in summary["iterations"]] == [(0, "compile_error"), (1, "correct")]
    assert len(of_kind(events, "verdict", iteration=0)) == 1  # iteration 0 was not redone
    assert of_kind(events, "run_interrupted")[0]["data"]["reason"] == "worker_dead"
    assert of_kind(events, "run_resumed")[0]["data"]["from_iteration"] == 0
    assert len(of_kind(events, "pass_started")) == 1  # the functional pass was not started twice
    # the state came back from the store: the resumed prompt carries iteration 0's compile error
    prompts = of_kind(events, "prompt_sent", iteration=1, agent="generation")
    assert len(prompts) == 2 and "candidate line 9" in str(prompts[-1]["data"]["messages"])
    assert summary["best"]["iteration"] == 1
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def _reaped(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)  # our child: reap it so it is not a zombie
    except ChildProcessError:
        return True
    return finished == pid


def test_a_resume_flag_adds_to_the_stored_llm_options():
    run = {"config": {"llm_options": {"timeout_s": 5.0}}, "problem_source": PROBLEM, "problem_name": "relu",
           "target": "cpu"}
    config = RunConfig.from_run(run, llm_options={"context_tokens": 8192})
    assert config.llm_options == {"timeout_s": 5.0, "context_tokens": 8192}


def test_a_resumed_run_gives_back_the_steps_its_endpoint_failed(db, server):
    """Restored from the store: iterations the endpoint failed used up no step (as in the running loop)."""
    from kforge_core.loop.state import restore_state

    server.enqueue_for("gen-model", server_error(), "No code, sorry.", server_error(), server_error())
    config = make_config(server, max_functional_iters=3, max_endpoint_failures=2,
                         llm_options={"timeout_s": 5.0, "max_retries": 0})
    run_id, seen, summary, events = run_scripted(db, config)
    assert [it["status"] for it in summary["iterations"]] == ["no_program"] * 4  # failed, judged, failed, failed
    assert "failed 2 times in a row" in summary["error"]
    with open_store(db) as store:
        state = restore_state(store, run_id, config)
    assert state.functional_steps == 1 and state.next_iteration == 4
