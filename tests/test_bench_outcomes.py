"""What a bench says about each problem: its outcome (correct / failed / unsupported / error), the last verdict and
its reason, the agent's coverage note -- in results.json, results.csv, report.html and the printed summary -- the
stratified order, and `--time-limit` followed by a resume. Real bench runs over tiny problems of our own: the real
evaluator on the CPU target, the built-in agent (a matrix-product-only problem it cannot write) and a local
OpenAI-protocol server (a wrong program, slow replies)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kforge_core.bench.kinds import KINDS, problem_kind, stratified
from kforge_core.bench.metrics import counts_text, summarize
from kforge_core.bench.problem_run import trim_reason
from kforge_core.bench.report import write_reports
from kforge_core.bench.suite import SuiteProblem
from kforge_core.loop.engine import Synthesis
from kforge_core.store import open_store
from tests.cli_env import cli_env
from tests.fakes.openai_replies import slow
from tests.fakes.openai_server import FakeOpenAIServer
from tests.loop_fixtures import FIXTURES, ScriptedAgent, offline_config, scripted_evaluate

REPO = Path(__file__).resolve().parents[1]
RELU = (FIXTURES / "problem_relu.py").read_text()
MATMUL_ONLY = (FIXTURES / "problem_matmul_only.py").read_text()
NOT_A_PROBLEM = "import torch\nx = 1\n"  # no Model, no get_inputs: the bench records it as an error


def _program(name: str) -> str:
    return f"```python\n{(FIXTURES / name).read_text()}```"


def _bench(suite: Path, out: Path, db: Path, *extra: str, server: FakeOpenAIServer | None = None) -> list[str]:
    agent = ["--agent", "llm", "--base-url", server.base_url, "--model", "gen-model"] if server else \
        ["--agent", "builtin"]
    return [sys.executable, "-m", "kforge_core", "bench", "--suite", str(suite), "--target", "cpu", *agent,
            "--out", str(out), "--db", str(db), "--max-optimization-iters", "0", "--no-baselines", *extra]


def _run(cmd: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(tmp_path), cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


def _results(out: Path) -> tuple[dict, dict[str, dict], list[dict], str]:
    data = json.loads((out / "results.json").read_text())
    rows = list(csv.DictReader((out / "results.csv").open()))
    return data, {r["problem"]: r for r in data["problems"]}, rows, (out / "report.html").read_text()


# ------------------------------------------------------------------------------------------------ real benches

def test_unsupported_and_error_are_outcomes_with_their_reasons(tmp_path):
    """The built-in cannot write a bare matrix product: `unsupported` after ONE step with its reason and coverage
    note, in every output; a file that is not a problem is an `error` with the loader's reason."""
    suite = tmp_path / "kb"
    (suite / "level1").mkdir(parents=True)
    (suite / "level1" / "1_Matmul_only.py").write_text(MATMUL_ONLY)
    (suite / "level1" / "2_Not_a_problem.py").write_text(NOT_A_PROBLEM)
    out = tmp_path / "out"
    done = _run(_bench(suite, out, tmp_path / "runs.db", "--max-functional-iters", "3"), tmp_path)
    data, by_name, rows, page = _results(out)
    mm = by_name["level1/1_Matmul_only"]
    assert (mm["outcome"], mm["status"], mm["iterations"], mm["kind"]) == ("unsupported", "unsupported", 1, "matmul")
    assert mm["reason"].startswith("nothing to synthesize: the module is only matrix products")
    assert "matrix product via torch" in mm["coverage"]
    bad = by_name["level1/2_Not_a_problem"]
    assert bad["outcome"] == "error" and "missing Model" in bad["reason"]
    summary = data["summary"]
    assert (summary["correct"], summary["failed"], summary["unsupported"], summary["error"],
            summary["supported"]) == (0, 0, 1, 1, 0)
    assert summary["per_kind"]["matmul"]["unsupported"] == 1 and summary["per_level"]["1"]["error"] == 1
    csv_row = next(r for r in rows if r["problem"] == "level1/1_Matmul_only")
    assert csv_row["outcome"] == "unsupported" and csv_row["reason"] == mm["reason"]
    assert csv_row["coverage"] == mm["coverage"] and csv_row["kind"] == "matmul"
    assert "nothing to synthesize: the module is only matrix products" in page and "missing Model" in page
    assert "correct 0/2 · failed 0 · unsupported 1 · error 1 (supported 0)" in done.stdout
    assert "unsupported (last verdict no_program: nothing to synthesize" in done.stderr


def test_time_limit_stops_the_running_problem_then_the_same_command_runs_it_again(tmp_path):
    """The first problem starts before the 1 s limit and would run past it (each reply takes 3 s): it is stopped at
    the limit and recorded as stopped (not failed), no other one starts, the results say they are partial; the
    same command without the limit runs the stopped problem again and then the rest, in the stratified order. The
    last problem's program is wrong: it fails with the evaluator's reason, not "no correct program in N functional
    step(s)"."""
    suite = tmp_path / "kb"
    (suite / "level1").mkdir(parents=True)
    (suite / "level2").mkdir()
    (suite / "level1" / "1_ReLU.py").write_text(RELU)
    (suite / "level1" / "2_Sum_reduction.py").write_text(RELU)  # named as a reduction: another kind
    (suite / "level2" / "1_Gemm_ReLU.py").write_text(RELU)
    out, db = tmp_path / "out", tmp_path / "runs.db"
    replies = iter([slow(3.0, _program("correct_fast.py"))] + [slow(0.5, _program(name)) for name in
                                                                ("correct_fast.py", "correct_fast.py", "wrong.py")])
    with FakeOpenAIServer(models=("gen-model",), responder=lambda _r: next(replies)) as s:
        first = _run(_bench(suite, out, db, "--max-functional-iters", "1", "--time-limit", "1", server=s), tmp_path)
        data, by_name, rows, page = _results(out)
        assert list(by_name) == ["level1/1_ReLU"]
        stopped = by_name["level1/1_ReLU"]
        assert (stopped["outcome"], stopped["status"], stopped["correct"]) == ("stopped", "stopped", False)
        assert stopped["reason"].startswith("stopped at the time limit after ") and stopped["reason"].endswith(" s")
        assert 1 <= stopped["stopped_after_s"] < 60
        assert rows[0]["outcome"] == "stopped" and rows[0]["reason"] == stopped["reason"]
        summary = data["summary"]
        assert summary["partial"] is True and summary["not_run"] == 2 and summary["suite_problems"] == 3
        assert (summary["stopped"], summary["failed"], summary["supported"], summary["problems"]) == (1, 0, 0, 1)
        assert summary["correctness_rate"] is None and summary["per_level"]["1"]["stopped"] == 1
        assert "time limit of 1 s reached" in summary["stopped_by"] and "time limit of 1 s reached" in first.stdout
        assert "correct 0/0 · failed 0 · unsupported 0 · stopped 1 (supported 0)" in first.stdout
        assert "2 of 3 problems not run, 1 stopped at the time limit" in page
        assert "stopped (stopped at the time limit after" in first.stderr
        assert len(s.chat_requests) == 1
        with open_store(db) as store:
            assert store.get_run(stopped["run_id"])["status"] == "cancelled"

        second = _run(_bench(suite, out, db, "--max-functional-iters", "1", server=s), tmp_path)
        assert ("resuming: 0 of 3 problems already done, 3 to go (1 stopped at the time limit before, run again)"
                in second.stderr)
        data, by_name, _, _ = _results(out)
        assert list(by_name) == ["level1/1_ReLU", "level1/2_Sum_reduction", "level2/1_Gemm_ReLU"]
        assert [r["kind"] for r in data["problems"]] == ["elementwise", "reduction", "fused gemm"]
        assert by_name["level1/1_ReLU"]["outcome"] == "correct" and len(s.chat_requests) == 4
        assert by_name["level1/1_ReLU"]["run_id"] != stopped["run_id"]
        assert data["summary"]["partial"] is False and "partial" not in second.stdout
        assert data["summary"]["stopped"] == 0
        failed = by_name["level2/1_Gemm_ReLU"]
        assert (failed["outcome"], failed["status"], failed["last_status"]) == ("failed", "failed", "incorrect")
        assert failed["reason"] and "functional step" not in failed["reason"]
        rows = {r["problem"]: r for r in csv.DictReader((out / "results.csv").open())}
        assert rows["level2/1_Gemm_ReLU"]["reason"] == failed["reason"]
        page = (out / "report.html").read_text().replace("&#x27;", "'").replace("&quot;", '"')
        assert failed["reason"][:60] in page
        assert f"failed (last verdict incorrect: {failed['reason'][:40]}" in second.stderr
        assert (data["summary"]["failed"], data["summary"]["supported"]) == (1, 3)


HANGING = (FIXTURES / "correct_fast.py").read_text().replace(
    "for (int64_t i = 0; i < n; ++i)", "volatile int spin = 1; while (spin) {}\n    for (int64_t i = 0; i < n; ++i)")


def test_problem_time_limit_stops_a_hanging_evaluation_then_a_resume_runs_it_again(tmp_path):
    """A candidate whose kernel never returns: `--problem-time-limit` stops its run through the cancel path (the
    evaluation's process group is killed, far before the evaluation's own timeout) and the problem is recorded as
    stopped; the same command runs it again (here to a correct program)."""
    suite = tmp_path / "kb"
    (suite / "level1").mkdir(parents=True)
    (suite / "level1" / "1_ReLU.py").write_text(RELU)
    out, db = tmp_path / "out", tmp_path / "runs.db"
    assert "while (spin)" in HANGING
    replies = iter([f"```python\n{HANGING}```", _program("correct_fast.py")])
    with FakeOpenAIServer(models=("gen-model",), responder=lambda _r: next(replies)) as s:
        first = _run(_bench(suite, out, db, "--max-functional-iters", "1", "--problem-time-limit", "8",
                            server=s), tmp_path)
        data, by_name, _, _ = _results(out)
        hung = by_name["level1/1_ReLU"]
        assert hung["outcome"] == "stopped"
        assert re.fullmatch(r"stopped at the time limit after \d+ s", hung["reason"]), hung["reason"]
        assert 8 <= hung["stopped_after_s"] < 120  # the evaluation's own timeout is far longer
        summary = data["summary"]
        assert (summary["correct"], summary["stopped"], summary["problems"]) == (0, 1, 1)
        assert summary["partial"] is True and summary["not_run"] == 0
        assert "1 problem(s) stopped at the time limit; the same command runs them again" in first.stderr
        with open_store(db) as store:
            events = [e["kind"] for e in store.events(hung["run_id"])]
            assert "cancel_requested" in events and store.get_run(hung["run_id"])["status"] == "cancelled"

        second = _run(_bench(suite, out, db, "--max-functional-iters", "1", server=s), tmp_path)
        assert "resuming: 0 of 1 problems already done, 1 to go (1 stopped at the time limit before" in second.stderr
        data, by_name, _, _ = _results(out)
        assert by_name["level1/1_ReLU"]["outcome"] == "correct" and len(s.chat_requests) == 2
        assert data["summary"]["partial"] is False


def test_stopped_problems_are_counted_and_listed_but_left_out_of_the_rates():
    records = [{"problem": "a", "level": 1, "kind": "elementwise", "correct": True, "speedup_vs_eager": 2.0},
               {"problem": "b", "level": 1, "kind": "elementwise", "correct": False, "status": "failed"},
               {"problem": "c", "level": 1, "kind": "elementwise", "correct": False, "status": "stopped",
                "reason": "stopped at the time limit after 30 s"}]
    summary = summarize(records)
    assert (summary["problems"], summary["correct"], summary["failed"], summary["stopped"]) == (3, 1, 1, 1)
    assert summary["supported"] == 2 and summary["correctness_rate"] == 0.5
    assert summary["fast_p_vs_eager"]["1"] == 0.5 and summary["per_level"]["1"]["fast_1_vs_eager"] == 0.5
    assert counts_text(summary) == "correct 1/2 · failed 1 · unsupported 0 · stopped 1 (supported 2)"


def test_problem_time_limit_must_be_positive(tmp_path):
    done = subprocess.run(_bench(tmp_path, tmp_path / "out", tmp_path / "runs.db", "--problem-time-limit", "-1"),
                          capture_output=True, text=True, env=cli_env(tmp_path), cwd=REPO, timeout=120)
    assert done.returncode == 2 and "--problem-time-limit must be a positive number of seconds" in done.stderr


def test_time_limit_must_be_positive(tmp_path):
    done = subprocess.run(_bench(tmp_path, tmp_path / "out", tmp_path / "runs.db", "--time-limit", "0"),
                          capture_output=True, text=True, env=cli_env(tmp_path), cwd=REPO, timeout=120)
    assert done.returncode == 2 and "--time-limit must be a positive number of seconds" in done.stderr


# ------------------------------------------------------------------------------------------------ the loop

class _UnsupportedAgent(ScriptedAgent):
    """Writes the scripted programs; where the script says None, says it cannot write the problem at all."""

    def generate(self, request, on_token=None):
        from kforge_core.agents.base import GenerationResult

        result = super().generate(request, on_token)
        if result.program is None:
            return GenerationResult(program=None, error="unsupported: scans are not written", unsupported=True,
                                    coverage="0 of 1 nodes synthesized; kept in PyTorch: cumsum")
        return result


class _Deterministic(_UnsupportedAgent):
    deterministic = True


def test_an_agent_that_cannot_write_the_problem_ends_the_run_unsupported_after_one_step():
    agent = _UnsupportedAgent([None, None, None])
    events = list(Synthesis(offline_config(max_functional_iters=3), agent, agent,
                            evaluate_fn=scripted_evaluate).events())
    finished = [e for e in events if e.kind == "iteration_finished"]
    assert [(e.iteration, e.status) for e in finished] == [(0, "no_program")]
    missing = next(e for e in events if e.kind == "program_missing")
    assert missing.unsupported and missing.coverage.startswith("0 of 1 nodes")
    done = events[-1]
    assert (done.status, done.error) == ("unsupported", "unsupported: scans are not written")


def test_unsupported_after_a_written_program_is_a_failure_not_the_agents_reach():
    """It wrote a (wrong) program first: the problem is within its reach, so the run fails with its reason."""
    agent = _Deterministic(["# wrong", None, None])
    events = list(Synthesis(offline_config(max_functional_iters=3), agent, agent,
                            evaluate_fn=scripted_evaluate).events())
    assert events[-1].status == "failed"
    assert [e.status for e in events if e.kind == "iteration_finished"] == ["incorrect", "no_program"]


def test_unsupported_runs_are_a_final_status_not_resumable(tmp_path):
    from kforge_core.store import RUN_STATUSES, open_store
    from kforge_core.store.errors import InvalidTransition

    assert "unsupported" in RUN_STATUSES
    with open_store(tmp_path / "runs.db") as store:
        run_id = store.create_run("scan", RELU, "cpu", agent="builtin")
        store.start_run(run_id)
        store.finish_run(run_id, "unsupported", error="unsupported: scans are not written")
        assert store.get_run(run_id)["status"] == "unsupported"
        with pytest.raises(InvalidTransition):
            store.resume_run(run_id)


# ------------------------------------------------------------------------------------------------ kinds, order

def _problem(tmp_path: Path, level: int, stem: str, source: str = RELU) -> SuiteProblem:
    d = tmp_path / f"level{level}"
    d.mkdir(exist_ok=True)
    (d / f"{stem}.py").write_text(source)
    return SuiteProblem(f"level{level}/{stem}", level, d / f"{stem}.py")


@pytest.mark.parametrize("level, stem, kind", [
    (1, "19_ReLU", "elementwise"), (1, "88_MinGPTNewGelu", "elementwise"), (1, "23_Softmax", "softmax"),
    (1, "47_Sum_reduction_over_a_dimension", "reduction"), (1, "51_Argmax_over_a_dimension", "reduction"),
    (1, "89_cumsum", "scan"), (1, "40_LayerNorm", "norm"), (1, "37_FrobeniusNorm_", "norm"),
    (1, "42_Max_Pooling_2D", "pooling"), (1, "95_CrossEntropyLoss", "loss"),
    (1, "1_Square_matrix_multiplication_", "matmul"), (1, "63_conv_standard_2D__square_input__square_kernel", "conv"),
    (2, "1_Conv2D_ReLU_BiasAdd", "fused conv"), (2, "76_Gemm_Add_ReLU", "fused gemm"),
    (2, "7_Something_else", "fused other")])
def test_problem_kind_from_the_file_name(tmp_path, level, stem, kind):
    assert problem_kind(_problem(tmp_path, level, stem)) == kind


def test_problem_kind_from_the_operators_when_the_name_says_nothing(tmp_path):
    softmax = RELU.replace("torch.relu(x)", "torch.softmax(x, dim=-1)")
    assert problem_kind(_problem(tmp_path, 1, "3_mystery", softmax)) == "softmax"
    assert problem_kind(_problem(tmp_path, 1, "4_mystery")) == "elementwise"
    assert problem_kind(_problem(tmp_path, 2, "5_mystery", MATMUL_ONLY)) == "fused gemm"


def test_every_prefix_spans_the_kinds_and_keeps_their_shares(tmp_path):
    counts = {"elementwise": 6, "reduction": 2, "softmax": 1, "fused conv": 12, "fused gemm": 6}
    problems, kinds = [], {}
    for kind, n in counts.items():
        for i in range(n):
            p = SuiteProblem(f"{kind}/{i}", 1, tmp_path / f"{kind.replace(' ', '_')}_{i}.py")
            problems.append(p)
            kinds[p.name] = kind
    order = stratified(problems, kinds)
    assert sorted(p.name for p in order) == sorted(p.name for p in problems)  # a permutation
    n_kinds = len(counts)
    assert {kinds[p.name] for p in order[:n_kinds]} == set(counts)  # the first round: one of every kind
    assert [kinds[p.name] for p in order[:n_kinds]] == [k for k in KINDS if k in counts]
    # after it, each kind within one problem of its share of the prefix (the first round may leave the largest
    # kind up to n_kinds * its share behind; the next pick goes to it)
    for n in range(n_kinds + 1, len(order) + 1):
        for kind, total in counts.items():
            share = total * n / len(order)
            assert abs(sum(1 for p in order[:n] if kinds[p.name] == kind) - share) <= 1.0 + 1e-9, (n, kind)


# ------------------------------------------------------------------------------------------------ small parts

def test_trim_reason_keeps_a_readable_line():
    assert trim_reason(None) == "" and trim_reason("  \n") == ""
    tb = "Traceback (most recent call last):\n  File \"x.py\", line 1\n    f()\nRuntimeError: CUDA out of memory"
    assert trim_reason(tb) == "RuntimeError: CUDA out of memory"
    assert trim_reason("compile_error:\n  line 3:   expected ';'") == "compile_error: line 3: expected ';'"
    long = trim_reason("x" * 1000)
    assert len(long) == 300 and long.endswith("…")


def test_counts_per_level_and_kind_and_the_best_baseline():
    records = [
        {"problem": "a", "level": 1, "kind": "elementwise", "status": "succeeded", "correct": True,
         "speedup_vs_eager": 2.0, "speedup_vs_compiled": 0.5},
        {"problem": "b", "level": 1, "kind": "matmul", "status": "unsupported", "correct": False},
        {"problem": "c", "level": 2, "kind": "fused gemm", "status": "failed", "correct": False},
        {"problem": "d", "level": 2, "kind": "fused gemm", "status": "error", "correct": False},
    ]
    s = summarize(records)
    assert (s["correct"], s["failed"], s["unsupported"], s["error"], s["supported"]) == (1, 1, 1, 1, 2)
    assert s["geomean_speedup_vs_best_baseline_correct_only"] == 0.5  # the better baseline: torch.compile
    assert s["geomean_speedup_vs_best_baseline_supported_failures_as_1"] == pytest.approx(0.5 ** 0.5)
    assert list(s["per_kind"]) == ["elementwise", "matmul", "fused gemm"]  # in KINDS order
    assert (s["per_kind"]["fused gemm"]["failed"], s["per_kind"]["fused gemm"]["error"]) == (1, 1)
    assert s["per_level"]["1"]["unsupported"] == 1
    assert counts_text(s) == "correct 1/4 · failed 1 · unsupported 1 · error 1 (supported 2)"


def test_a_partial_bench_says_so_in_every_output(tmp_path):
    records = [{"problem": "a", "level": 1, "kind": "elementwise", "status": "failed", "correct": False,
                "last_status": "runtime_error", "reason": "RuntimeError: out of memory", "coverage": "1 of 1 nodes"}]
    meta = {"partial": True, "suite_problems": 5, "not_run": 4, "stopped_by": "time limit of 60 s reached"}
    summary = write_reports(tmp_path, records, meta)
    assert summary["partial"] and summary["not_run"] == 4
    assert json.loads((tmp_path / "results.json").read_text())["summary"]["stopped_by"] == meta["stopped_by"]
    page = (tmp_path / "report.html").read_text()
    assert "partial: time limit of 60 s reached; 4 of 5 problems not run" in page
    assert "RuntimeError: out of memory" in page and "runtime_error" in page


def test_the_last_verdict_is_the_last_judged_iteration_not_a_refusal_after_it(tmp_path):
    """The built-in's second step refuses ("no other variant") after a crash: the record gives the crash."""
    import time

    from kforge_core.bench.problem_run import run_record
    from kforge_core.store import open_store

    crash = "loading the candidate raised ValueError: synthesized for Model init arguments [16, 3]"
    with open_store(tmp_path / "runs.db") as store:
        run_id = store.create_run("conv", RELU, "cpu", agent="builtin")
        store.start_run(run_id)
        store.start_iteration(run_id, 0, "functional")
        store.finish_iteration(run_id, 0, "runtime_error", reason=crash,
                               verdict={"status": "runtime_error", "reason": crash, "target": "cpu"})
        store.start_iteration(run_id, 1, "functional")
        store.finish_iteration(run_id, 1, "no_program", reason=f"the candidate failed (runtime_error: {crash}); "
                                                               "it has no other variant")
        store.finish_run(run_id, "failed", error="the candidate failed; it has no other variant")
        rec = run_record(store, run_id, SuiteProblem("level2/1_Conv", 2, tmp_path / "1_Conv.py"), time.monotonic())
    assert (rec["last_status"], rec["reason"], rec["status"]) == ("runtime_error", crash, "failed")


def test_a_records_times_agree_with_its_speedups(tmp_path):
    """The best re-timed head to head (2.62 ms, 0.09x vs eager) while its own iteration's verdict timed eager at
    2.81 ms in another evaluation: the record's eager time is the one its speedup came from."""
    import time

    from kforge_core.bench.problem_run import run_record
    from kforge_core.store import open_store

    with open_store(tmp_path / "runs.db") as store:
        run_id = store.create_run("pool", RELU, "cpu", agent="builtin")
        store.start_run(run_id)
        store.start_iteration(run_id, 0, "functional")
        store.finish_iteration(run_id, 0, "correct", candidate_ms=2.5, speedup_vs_eager=1.1,
                               verdict={"status": "correct", "target": "cpu", "candidate_ms": 2.5, "eager_ms": 2.81,
                                        "compiled_ms": 2.97})
        store.set_best(run_id, 0, speedup_vs_eager=0.1, speedup_vs_compiled=2.0, candidate_ms=2.6)
        store.finish_run(run_id, "succeeded")
        rec = run_record(store, run_id, SuiteProblem("level1/41_Max", 1, tmp_path / "41_Max.py"), time.monotonic())
    assert rec["candidate_ms"] == 2.6 and rec["speedup_vs_eager"] == 0.1
    assert rec["eager_ms"] == pytest.approx(0.26) and rec["compiled_ms"] == pytest.approx(5.2)


def test_a_speedup_measured_noisy_says_so_in_every_bench_output(tmp_path):
    """A head-to-head whose eager timing was 8x its fastest trial (the 2-core box, KernelBench 12_Gemm_Multiply_
    LeakyReLU: "6.57x vs eager" with eager at 4.07 ms, 0.59 ms in a quiet run) or a verdict flagged noisy: the
    record, the progress line's words, the summary's count and the CSV carry it; a steady one carries nothing."""
    import csv
    import time

    from kforge_core.bench.metrics import counts_text
    from kforge_core.bench.problem_run import run_record
    from kforge_core.bench.report import write_reports
    from kforge_core.bench.runner import result_text
    from kforge_core.store import open_store

    def run(store, name: str, contest: dict | None, warnings: list[str]) -> dict:
        run_id = store.create_run(name, RELU, "cpu", agent="builtin")
        store.start_run(run_id)
        store.start_iteration(run_id, 0, "functional")
        store.finish_iteration(run_id, 0, "correct", candidate_ms=0.6, speedup_vs_eager=1.0,
                               verdict={"status": "correct", "target": "cpu", "candidate_ms": 0.6, "eager_ms": 0.6,
                                        "warnings": warnings})
        if contest:
            store.append_event(run_id, "head_to_head", contest)
        store.set_best(run_id, 0, speedup_vs_eager=6.57 if contest else 1.0, speedup_vs_compiled=1.4,
                       candidate_ms=0.62 if contest else 0.6)
        store.finish_run(run_id, "succeeded")
        return run_record(store, run_id, SuiteProblem(f"level2/{name}", 2, tmp_path / f"{name}.py"),
                          time.monotonic())

    contest = {"contenders": [{"iteration": 0, "candidate_ms": 0.62, "min_ms": 0.555, "max_ms": 1.0, "trials": 25,
                               "speedup_vs_eager": 6.57}],
               "eager": {"median_ms": 4.07, "min_ms": 0.511, "max_ms": 8.2, "trials": 25},
               "compiled": {"median_ms": 0.85, "min_ms": 0.8, "max_ms": 1.0, "trials": 25}, "best_iteration": 0}
    with open_store(tmp_path / "runs.db") as store:
        from_contest = run(store, "12_Gemm", contest, [])
        from_verdict = run(store, "13_Gemm", None, ["noisy timing (eager, median 2.68 ms is 6.9x its fastest trial "
                                                    "(0.39 ms; bound 1.3x) over 70 trials): re-time"])
        steady = run(store, "14_Gemm", None, ["some other warning"])
    assert len(from_contest["noise"]) == 1 and from_contest["noise"][0].startswith("noisy timing (eager")
    assert from_verdict["noise"] and from_verdict["noise"][0].startswith("noisy timing (eager")
    assert steady["noise"] == []
    assert result_text(from_contest) == "correct, 6.57x vs eager (noisy timing: re-time before trusting this number)"
    assert result_text(steady) == "correct, 1.00x vs eager"
    summary = write_reports(tmp_path / "out", [from_contest, from_verdict, steady], {"suite": "test"})
    assert summary["correct_noisy"] == 2 and "speedups measured noisy 2" in counts_text(summary)
    with open(tmp_path / "out" / "results.csv") as f:
        rows = {r["problem"]: r for r in csv.DictReader(f)}
    assert rows["level2/12_Gemm"]["noise"].startswith("noisy timing (eager") and rows["level2/14_Gemm"]["noise"] == ""
    assert "Speedups measured beyond the noise bounds" in (tmp_path / "out" / "report.html").read_text()
