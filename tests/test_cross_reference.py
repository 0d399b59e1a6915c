"""Cross-platform references end to end on the CPU target (issue: Metal target and cross-platform references):
a CPU run seeded with the CUDA example program, from a file and from a stored run's best program, must put that
program — labelled with its target — into the generation prompt, and the run must still reach a correct program."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kforge_core.store import open_store
from tests.cli_env import cli_env
from tests.fakes.openai_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures_loop"
CUDA_PROGRAM = REPO / "platforms" / "examples" / "cuda" / "candidate.py"


@pytest.fixture
def server():
    reply = f"```python\n{(FIXTURES / 'correct_fast.py').read_text()}```"
    with FakeOpenAIServer(models=("gen-model",), responder=lambda _req: reply) as s:
        yield s


def _synthesize(server, tmp_path, db, *extra):
    return subprocess.run(
        [sys.executable, "-m", "kforge_core", "synthesize", "--problem", str(FIXTURES / "problem_relu.py"),
         "--target", "cpu", "--base-url", server.base_url, "--model", "gen-model", "--no-baselines",
         "--max-functional-iters", "1", "--max-optimization-iters", "0", "--db", str(db), "--json", *extra],
        capture_output=True, text=True, env=cli_env(tmp_path), cwd=REPO, timeout=300)


def _first_generation_prompt(server) -> str:
    return json.dumps(server.chat_requests[0].messages)


def test_cpu_run_seeded_with_a_cuda_program_file(server, tmp_path):
    done = _synthesize(server, tmp_path, tmp_path / "runs.db", "--reference-program", str(CUDA_PROGRAM),
                       "--reference-target", "cuda")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "succeeded"
    prompt = _first_generation_prompt(server)
    assert "compile_cuda" in prompt  # the CUDA program itself travelled
    assert "cuda" in prompt.lower() and "reference" in prompt.lower()


def test_cpu_run_seeded_with_a_stored_cuda_runs_best_program(server, tmp_path):
    db = tmp_path / "runs.db"
    with open_store(db) as store:  # a finished CUDA run, as another machine would have stored it
        run_id = store.create_run("relu", (FIXTURES / "problem_relu.py").read_text(), "cuda", agent="llm")
        store.start_run(run_id)
        store.start_iteration(run_id, 0, "functional")
        store.finish_iteration(run_id, 0, "correct", reason="correct", code=CUDA_PROGRAM.read_text(),
                               candidate_ms=0.1, speedup_vs_eager=1.5)
        store.set_best(run_id, 0, speedup_vs_eager=1.5, candidate_ms=0.1)
        store.finish_run(run_id, "succeeded")
        failed = store.create_run("relu", "x", "cuda", agent="llm")
    done = _synthesize(server, tmp_path, db, "--reference-run", run_id)
    assert done.returncode == 0, done.stderr
    assert "compile_cuda" in _first_generation_prompt(server)
    with open_store(db) as store:
        new = store.get_run(json.loads(done.stdout)["run_id"])
    assert new["reference_target"] == "cuda" and "compile_cuda" in new["reference_program"]
    # a run with no correct program cannot be a reference: a clear usage error, nothing created
    bad = _synthesize(server, tmp_path, db, "--reference-run", failed)
    assert bad.returncode == 2 and "no correct program" in bad.stderr
