"""`python -m kforge_core bench` end to end: real subprocesses, a real local OpenAI-protocol server, the real
evaluator on the CPU target, a KernelBench-layout directory, and an interruption followed by a resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_env import cli_env, interrupt_after_first_record, start_bench
from tests.fakes.openai_replies import slow
from tests.fakes.openai_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures_loop"


def _suite(root: Path, n_level1: int = 2) -> Path:
    """A KernelBench-layout checkout: level1/ with relu problems, level2/ with one more."""
    problem = (FIXTURES / "problem_relu.py").read_text()
    for i in range(n_level1):
        (root / "level1").mkdir(parents=True, exist_ok=True)
        (root / "level1" / f"{i + 1}_ReLU.py").write_text(problem)
    (root / "level2").mkdir(parents=True, exist_ok=True)
    (root / "level2" / "1_ReLU_again.py").write_text(problem)
    return root


def _program_reply(_request) -> str:
    return f"```python\n{(FIXTURES / 'correct_fast.py').read_text()}```"


def _bench(server, db, out, suite, *extra):
    return [sys.executable, "-m", "kforge_core", "bench", "--suite", str(suite), "--target", "cpu", "--agent",
            "llm", "--base-url", server.base_url, "--model", "gen-model", "--out", str(out), "--db", str(db),
            "--max-functional-iters", "1", "--max-optimization-iters", "0", "--no-baselines", *extra]


@pytest.fixture
def server():
    with FakeOpenAIServer(models=("gen-model",), responder=_program_reply) as s:
        yield s


def test_bench_kernelbench_directory_writes_reports(server, tmp_path):
    suite = _suite(tmp_path / "KernelBench", n_level1=1)
    out = tmp_path / "out"
    done = subprocess.run(_bench(server, tmp_path / "runs.db", out, suite, "--json"), capture_output=True,
                          text=True, env=cli_env(tmp_path), cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["problems"] == 2 and summary["correct"] == 2
    results = json.loads((out / "results.json").read_text())
    assert [p["problem"] for p in results["problems"]] == ["level1/1_ReLU", "level2/1_ReLU_again"]
    assert {p["level"] for p in results["problems"]} == {1, 2}
    assert all(p["status"] == "succeeded" and p["run_id"] for p in results["problems"])
    assert "fast_p_vs_eager" in results["summary"] and "geomean_speedup_vs_eager_failures_as_1" in results["summary"]
    assert (out / "results.csv").read_text().count("\n") == 3
    assert "<html>" in (out / "report.html").read_text()[:200].lower() or "plotly" in (out / "report.html").read_text()
    # the level filter
    out2 = tmp_path / "out2"
    done = subprocess.run(_bench(server, tmp_path / "runs.db", out2, suite, "--level", "2", "--json"),
                          capture_output=True, text=True, env=cli_env(tmp_path), cwd=REPO, timeout=600)
    assert json.loads(done.stdout)["problems"] == 1


def test_bench_resumes_after_interruption(tmp_path):
    """Interrupted during its second problem, the bench keeps the first; the same command then runs the other two.
    Every reply after the first takes 2 s, so the interruption lands mid-problem however fast the problems run."""
    served = []

    def program_reply(request):
        served.append(request)
        return _program_reply(request) if len(served) == 1 else slow(2.0, _program_reply(request))

    with FakeOpenAIServer(models=("gen-model",), responder=program_reply) as server:
        _interrupt_then_resume(server, tmp_path)


def _interrupt_then_resume(server, tmp_path):
    suite = _suite(tmp_path / "kb", n_level1=2)
    out, db = tmp_path / "out", tmp_path / "runs.db"
    progress = out / "progress.jsonl"
    interrupt_after_first_record(start_bench(_bench(server, db, out, suite), tmp_path), progress)
    first = [json.loads(line) for line in progress.read_text().splitlines()]
    assert 1 <= len(first) < 3
    calls_before = len(server.chat_requests)

    done = subprocess.run(_bench(server, db, out, suite, "--json"), capture_output=True, text=True,
                          env=cli_env(tmp_path), cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr
    records = json.loads((out / "results.json").read_text())["problems"]
    assert len(records) == 3 and all(r["correct"] for r in records)
    # the problems finished before the interruption kept their runs and were not synthesized again
    kept = {r["problem"]: r["run_id"] for r in first}
    assert all(r["run_id"] == kept[r["problem"]] for r in records if r["problem"] in kept)
    assert len(server.chat_requests) - calls_before == 3 - len(first)
