"""`python -m kforge_core synthesize` and `runs`, run as real subprocesses against a real local OpenAI-protocol
server, with the real evaluator on the CPU target."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kforge_core.cli import build_parser
from kforge_core.cli.synthesize_cmd import NO_ENDPOINT_NOTE
from kforge_core.loop import CANCELLED_ITERATION_STATUS
from kforge_core.store import open_store
from tests.cli_env import cli_env
from tests.fakes.openai_replies import stall
from tests.fakes.openai_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures_loop"
PROBLEM = FIXTURES / "problem_relu.py"


@pytest.fixture
def server():
    with FakeOpenAIServer(models=("gen-model",)) as s:
        yield s


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """The CLI's environment: no endpoint, key or model but what a test passes; settings file absent."""
    return cli_env(tmp_path)


def cli(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kforge_core", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


def program(name: str) -> str:
    return f"Here is the program.\n```python\n{(FIXTURES / name).read_text()}```\n"


def llm_flags(server: FakeOpenAIServer) -> list[str]:
    return ["--base-url", server.base_url, "--model", "gen-model", "--no-baselines"]


def test_synthesize_json_and_the_runs_commands(server, env, tmp_path):
    db = str(tmp_path / "runs.db")
    server.enqueue(program("compile_error.py"), program("correct_fast.py"))
    done = cli(env, "synthesize", "--problem", str(PROBLEM), "--target", "cpu", *llm_flags(server),
               "--max-functional-iters", "3", "--max-optimization-iters", "0", "--db", db, "--json",
               "--min-trials", "4", "--timing-budget", "0.3")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "succeeded" and out["run_id"]
    with open_store(db) as s:  # the timing options, as the app's Evaluation settings set them
        assert s.get_run(out["run_id"])["config"]["eval_timing_options"] == {"min_trials": 4, "budget_s": 0.3}
    assert [(it["index"], it["pass"], it["status"]) for it in out["iterations"]] == [
        (0, "functional", "compile_error"), (1, "functional", "correct")]
    assert "candidate line 9" in out["iterations"][0]["reason"] and out["iterations"][1]["candidate_ms"] > 0
    best = out["best"]
    assert best["iteration"] == 1 and best["status"] == "correct"
    assert best["code"] == (FIXTURES / "correct_fast.py").read_text()
    assert best["candidate_ms"] > 0 and best["eager_ms"] > 0 and best["speedup_vs_eager"] > 0
    assert best["speedup_vs_compiled"] is None  # --no-baselines
    assert "no optimization pass" in out["stop_reason"]
    # readable progress on stderr; model tokens only with -v
    assert "[0] compile_error: C++ compilation failed: candidate line 9" in done.stderr
    assert "[1] correct:" in done.stderr and "vs eager" in done.stderr and "new best" in done.stderr
    assert f"run {out['run_id']} succeeded" in done.stderr
    assert "extern \"C\"" not in done.stderr

    listed = cli(env, "runs", "--json", "--db", db)
    assert listed.returncode == 0
    (row,) = json.loads(listed.stdout)
    assert row["id"] == out["run_id"] and row["status"] == "succeeded" and row["best_iteration"] == 1
    assert out["run_id"] in cli(env, "runs", "--db", db).stdout

    shown = cli(env, "runs", "show", out["run_id"], "--json", "--db", db)
    assert shown.returncode == 0
    assert json.loads(shown.stdout) == {k: v for k, v in out.items() if k not in ("stop_reason", "notes")}
    text = cli(env, "runs", "show", out["run_id"], "--db", db).stdout
    assert "[0] functional   compile_error" in text and "[1] functional   correct" in text
    assert "best: iteration 1" in text


def test_ctrl_c_cancels_cleanly_and_runs_resume_finishes(server, env, tmp_path):
    db = str(tmp_path / "runs.db")
    server.enqueue(stall(program("correct_fast.py"), after_chunks=4, seconds=60))
    proc = subprocess.Popen([sys.executable, "-m", "kforge_core", "synthesize", "--problem", str(PROBLEM),
                             "--target", "cpu", *llm_flags(server), "--max-optimization-iters", "0", "--db", db,
                             "--json", "-v"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while not server.chat_requests and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(0.5)  # the reply is streaming (then stalls)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    out = json.loads(stdout)
    assert out["status"] == "cancelled"
    assert [(it["status"], it["finished"]) for it in out["iterations"]] == [(CANCELLED_ITERATION_STATUS, True)]
    assert "Here is the prog" in stderr  # -v streams the model's tokens
    assert "Traceback" not in stderr
    with open_store(db) as store:
        assert store.events(out["run_id"])[-1]["kind"] == "run_finished"

    server.enqueue(program("correct_fast.py"))
    resumed = cli(env, "runs", "resume", out["run_id"], "--json", "--db", db, "--no-baselines")
    assert resumed.returncode == 0, resumed.stderr
    again = json.loads(resumed.stdout)
    assert again["run_id"] == out["run_id"] and again["status"] == "succeeded"
    assert [it["status"] for it in again["iterations"]] == [CANCELLED_ITERATION_STATUS, "correct"]


def test_unreachable_endpoint_is_a_usage_error_naming_the_url(env, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    db = str(tmp_path / "runs.db")
    done = cli(env, "synthesize", "--problem", str(PROBLEM), "--target", "cpu", "--base-url",
               f"http://127.0.0.1:{port}/v1", "--model", "m", "--db", db, "--json")
    assert done.returncode == 2
    assert f"Error: cannot use the LLM endpoint http://127.0.0.1:{port}/v1" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert json.loads(cli(env, "runs", "--json", "--db", db).stdout) == []  # nothing was recorded


def test_without_an_endpoint_the_builtin_synthesizer_is_announced(env, tmp_path):
    # A wall-clock budget spent before the first step: this test is about the announcement, not the built-in agent.
    done = cli(env, "synthesize", "--problem", str(PROBLEM), "--target", "cpu", "--max-wall-s", "0.001",
               "--db", str(tmp_path / "runs.db"), "--json")
    assert NO_ENDPOINT_NOTE in done.stderr
    assert "Traceback" not in done.stderr
    if done.returncode == 0:  # the built-in agent is there
        out = json.loads(done.stdout)
        assert out["notes"] == [NO_ENDPOINT_NOTE] and out["agent"] == "builtin" and out["model"] is None
        assert "wall-clock budget spent" in out["stop_reason"], out
    else:  # not written yet: one clean line saying so
        assert done.returncode == 2 and "Error: " in done.stderr and "built-in" in done.stderr


@pytest.mark.parametrize("args, message", [
    (["synthesize", "--target", "cpu"], "synthesize needs --problem FILE and --target NAME"),
    (["synthesize", "--problem", "/no/such/problem.py", "--target", "cpu", "--agent", "llm", "--model", "m",
      "--base-url", "http://127.0.0.1:9/v1"], "problem file not found"),
    (["runs", "show", "nosuchrun"], "no run with id 'nosuchrun'"),
    (["synthesize", "--problem", str(PROBLEM), "--target", "cpu", "--timing-budget", "0"],
     "--timing-budget must be positive, got 0"),
])
def test_usage_errors_are_one_line(env, tmp_path, args, message):
    done = cli(env, *args, "--db", str(tmp_path / "runs.db"))
    assert done.returncode == 2 and f"Error: {message}" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("argv", [["synthesize"], ["runs"], ["runs", "show"], ["runs", "resume"],
                                  ["runs", "cancel"]])
def test_every_command_has_help(argv, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([*argv, "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m kforge_core " + " ".join(argv)) and len(text.splitlines()) > 5


# ---------------------------------------------------------------------------------------------- issue 24


def test_unknown_model_fails_before_the_run_naming_the_served_models(server, env, tmp_path):
    db = str(tmp_path / "runs.db")
    done = cli(env, "synthesize", "--problem", str(PROBLEM), "--target", "cpu", "--base-url", server.base_url,
               "--model", "no-such-model", "--db", db)
    assert done.returncode == 2
    assert "does not serve model(s) 'no-such-model'; it serves: gen-model" in done.stderr
    assert not server.chat_requests
    with open_store(db) as store:
        assert store.list_runs() == []


def test_fatal_endpoint_error_exits_3_prints_it_once_and_gallery_problems_get_cpu_sizes(server, env, tmp_path):
    from tests.fakes.openai_replies import error

    from tests.fakes.openai_replies import server_error

    db = str(tmp_path / "runs.db")
    server.enqueue(server_error(message="overloaded, try again"), error(400, "Unsupported parameter: 'frobnicate'"))
    gallery_problem = REPO / "assets/problems/level1/01_relu.py"
    done = cli(env, "synthesize", "--problem", str(gallery_problem), "--target", "cpu", *llm_flags(server),
               "--db", db)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("frobnicate") == 1, done.stderr
    assert "[0] model endpoint: " in done.stderr and "overloaded, try again" in done.stderr  # the retry, shown
    assert "retrying in " in done.stderr and "(attempt 2)" in done.stderr
    assert "[0] no_program: (the endpoint error above)" in done.stderr
    with open_store(db) as store:
        (run,) = store.list_runs()
        assert run["status"] == "failed"
        assert store.get_run(run["id"])["config"]["size_class"] == "cpu"  # as bench does on CPU targets
    # the prompt showed the sizes actually evaluated
    assert "batch_size = " in server.chat_requests[0].prompt and "CPU_SIZES" in server.chat_requests[0].prompt


def test_default_size_class():
    from kforge_core.cli.synthesize_cmd import default_size_class

    gallery_problem = (REPO / "assets/problems/level1/01_relu.py").read_text()
    assert default_size_class(gallery_problem, "cpu") == "cpu"
    assert default_size_class(PROBLEM.read_text(), "cpu") is None  # declares no CPU_SIZES: its own sizes
    assert default_size_class(gallery_problem, "no-such-target") is None


def test_progress_marks_the_models_thinking_and_warnings():
    import io

    from kforge_core.cli.synthesize_cmd import ProgressPrinter
    from kforge_core.loop.events import Tokens, UsageRecorded

    out = io.StringIO()
    printer = ProgressPrinter(out, verbose=True)
    for event in (Tokens(0, "generation", "hmm, tiling?", thinking=True), Tokens(0, "generation", "Here it is."),
                  UsageRecorded(0, "generation", 50, 10, warning="the server cut the prompt")):
        printer(event)
    lines = out.getvalue().splitlines()
    assert lines == ["  [thinking]", "hmm, tiling?", "  [answer]", "Here it is.",
                     "  [0] warning: the server cut the prompt"]


def test_progress_says_a_missing_program_once_and_the_real_stop_reason():
    """Issue 23: each no_program iteration was printed twice (its reason as "no program" and as "no_program")."""
    import io

    from kforge_core.cli.synthesize_cmd import ProgressPrinter, final_line
    from kforge_core.loop.events import IterationFinished, ProgramMissing, RunFinished

    out = io.StringIO()
    printer = ProgressPrinter(out)
    why = "the analysis recommended no move from the built-in catalogue"
    printer(ProgramMissing(iteration=5, error=why))
    printer(IterationFinished(iteration=5, pass_name="optimization", status="no_program", reason=why))
    printer(IterationFinished(iteration=6, pass_name="optimization", status="no_program", reason="stopped"))
    printer(RunFinished(status="succeeded", stop_reason=why, best_iteration=1))
    lines = out.getvalue().splitlines()
    assert lines == [f"  [5] no program: {why}", "  [6] no_program: stopped"]
    summary = {"run_id": "r1", "status": "succeeded", "best": None, "error": None, "stop_reason": printer.stop_reason}
    assert final_line(summary) == f"run r1 succeeded (stopped: {why})"


def test_evaluate_takes_the_timing_options(env, tmp_path):
    """`evaluate --min-trials N --timing-budget S`: at least N trials, and no more than a near-zero budget allows."""
    done = cli(env, "evaluate", "--problem", str(PROBLEM), "--candidate", str(FIXTURES / "correct_fast.py"),
               "--target", "cpu", "--no-baselines", "--min-trials", "3", "--timing-budget", "0.001", "--json")
    assert done.returncode == 0, done.stderr
    v = json.loads(done.stdout)
    assert v["status"] == "correct", v
    assert v["candidate"]["trials"] == v["eager"]["trials"] == 3, v["candidate"]
    bad = cli(env, "evaluate", "--problem", str(PROBLEM), "--candidate", str(PROBLEM), "--target", "cpu",
              "--min-trials", "-1")
    assert bad.returncode == 2 and "Error: --min-trials must be positive, got -1" in bad.stderr, bad.stderr
