"""The Runs, Compare and Settings pages over a real temporary store and settings file; and the app's promises that
are cheap to check: it never imports torch, it never shows a saved key in full, ceilings are never guessed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib

import pytest

from kforge_core.store import open_store
from tests.browser.appkit import REPO, app, app_env, texts, use_targets  # noqa: F401,F811 - pytest fixtures
from tests.browser.seed import seed_finished_run, seed_live_run, seed_unsupported_run
from tests.fakes.openai_server import FakeOpenAIServer


@pytest.fixture
def two_runs(app_env):
    with open_store() as s:
        done = seed_finished_run(s, problem_name="swish_bias")
        live = seed_live_run(s, problem_name="layernorm_live")
    return done, live


# --------------------------------------------------------------------------------------------------- Runs

def test_runs_page_lists_history(two_runs, use_targets):
    done, live = two_runs
    at = app("runs").run()
    assert not at.exception
    body = texts(at)
    assert "swish_bias" in body and "layernorm_live" in body
    assert "3.20x" in body  # best speedup of the finished run
    assert "succeeded" in body and "running" in body
    assert "built-in, rule-based (no LLM)" in body
    links = [link.proto for link in at.get("page_link")]
    assert any(done in str(p) for p in links) and any(live in str(p) for p in links)


def test_runs_page_filters(two_runs, use_targets):
    at = app("runs").run()
    at.text_input(key="kf-runs-search").set_value("layernorm").run()
    body = texts(at)
    assert "layernorm_live" in body and "swish_bias" not in body
    at.text_input(key="kf-runs-search").set_value("").run()
    at.multiselect(key="kf-runs-status").set_value(["succeeded"]).run()
    body = texts(at)
    assert "swish_bias" in body and "layernorm_live" not in body


def test_runs_page_marks_runs_whose_worker_died(app_env, use_targets):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with open_store() as s:
        run_id = seed_live_run(s, pid=dead.pid)
    at = app("runs").run()
    assert not at.exception
    assert "interrupted" in texts(at)
    with open_store() as s:
        assert s.get_run(run_id)["status"] == "interrupted"


def test_runs_page_empty_store(app_env, use_targets):
    at = app("runs").run()
    assert not at.exception
    assert "No runs yet" in texts(at)


# --------------------------------------------------------------------------------------------------- Compare

def test_compare_two_iterations(two_runs, use_targets):
    done, _ = two_runs
    at = app("compare", a=f"{done}:1", b=f"{done}:2").run()
    assert not at.exception
    body = texts(at)
    assert "#pragma omp parallel for" in body  # the diff A -> B
    rows = at.dataframe[0].value
    assert list(rows["side"]) == ["A", "B"]
    assert list(rows["vs eager"]) == ["1.60x", "3.20x"]
    assert "**B** is **2.00×** faster." in body


def test_compare_defaults_b_to_the_previous_program(two_runs, use_targets):
    done, _ = two_runs
    at = app("compare", a=f"{done}:2").run()
    assert not at.exception
    assert at.query_params["b"] == [f"{done}:1"] or at.query_params["b"] == f"{done}:1"


# --------------------------------------------------------------------------------------------------- Settings

def test_settings_saves_defaults_and_never_shows_the_key(app_env, use_targets):
    path = app_env / "settings.toml"
    path.write_text('[llm]\nmodel = "old"\n\n[other]\nkeep = true\n')
    at = app("settings").run()
    assert not at.exception
    at.text_input(key="kf-set-base-url").set_value("http://127.0.0.1:8000/v1")
    at.text_input(key="kf-set-api-key").set_value("sk-secret-abcdefgh-1234")
    at.text_input(key="kf-set-model").set_value("coder")
    at.text_input(key="kf-set-analysis-model").set_value("analyst")
    at.number_input(key="kf-set-price-in").set_value(2.5)
    at.number_input(key="kf-set-price-out").set_value(10.0)
    next(b for b in at.button if b.label == "Save").click().run()
    assert not at.exception
    saved = tomllib.loads(path.read_text())
    assert saved["llm"] == {"base_url": "http://127.0.0.1:8000/v1", "api_key": "sk-secret-abcdefgh-1234",
                            "model": "coder", "analysis_model": "analyst"}
    assert saved["pricing"] == {"prompt_price_per_1m_tokens": 2.5, "completion_price_per_1m_tokens": 10.0}
    assert saved["other"] == {"keep": True}  # other tables survive
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    at = app("settings").run()  # a fresh page: the key shows masked, never in full
    assert "sk-secret-abcdefgh-1234" not in str(at._tree)
    assert "…1234" in at.text_input(key="kf-set-api-key").proto.placeholder


def test_settings_endpoint_check_lists_models_and_latency(app_env, use_targets):
    with FakeOpenAIServer("ok", models=("coder", "analyst")) as server:
        at = app("settings").run()
        at.text_input(key="kf-set-base-url").set_value(server.base_url)
        at.text_input(key="kf-set-model").set_value("coder")
        next(b for b in at.button if b.label == "Check endpoint").click().run()
    assert not at.exception
    ok = " ".join(s.value for s in at.success)
    assert "answered in" in ok and "`coder` is listed" in ok


def test_settings_endpoint_check_unreachable(app_env, use_targets):
    at = app("settings").run()
    at.text_input(key="kf-set-base-url").set_value("http://127.0.0.1:9/v1")
    at.text_input(key="kf-set-model").set_value("coder")
    next(b for b in at.button if b.label == "Check endpoint").click().run()
    assert not at.exception
    assert any("Endpoint check failed" in e.value for e in at.error)


def test_settings_shows_rules_tolerances_and_ceilings(app_env, use_targets):
    from kforge_core.eval.rules import RULES

    cache = app_env / "cache"
    cache.mkdir()
    cpu = next(t for t in use_targets if t["name"] == "cpu")
    (cache / "ceilings").mkdir()
    (cache / "ceilings" / "ceilings.json").write_text(json.dumps({f"cpu:{cpu['device_name']}": {
        "bandwidth_gbs": 12.5, "fp32_tflops": 0.0731, "method": "seeded for the test"}}))
    at = app("settings").run()
    assert not at.exception
    body = texts(at)
    assert all(f"**{rule.id}**" in body for rule in RULES)
    assert r"\_\_import\_\_" in body  # dunders stay dunders, not bold
    rows = at.dataframe[0].value.to_dict("records")
    assert {r["policy"] for r in rows} == {"default", "kernelbench"}
    assert {(r["policy"], r["dtype"]): r["rtol"] for r in rows}[("default", "bf16")] == pytest.approx(1.6e-2)
    values = {m.label: m.value for m in at.metric}
    assert values["Memory bandwidth"] == "12.5 GB/s" and values["fp32 peak"] == "0.0731 TFLOP/s"
    assert values["bf16 peak"] == "unknown"  # never measured: never guessed


def test_ceilings_cache_path_is_the_cores(app_env):
    from app.ceilings import cache_path
    from kforge_core.eval.ceilings import cache_path as core_cache_path

    assert cache_path() == core_cache_path()


def test_settings_file_that_is_not_toml_is_reported(app_env, use_targets):
    (app_env / "settings.toml").write_text("[llm\nbroken")
    at = app("settings").run()
    assert not at.exception
    assert any("not valid TOML" in e.value for e in at.error)
    at = app().run()  # the Synthesize page says so too, and falls back to the built-in synthesizer
    assert not at.exception
    assert any("not valid TOML" in w.value for w in at.warning)


# --------------------------------------------------------------------------------------------------- promises

def test_app_process_never_imports_torch(tmp_path):
    """Every page, a stored run and a live one render without torch in the app process (discovery, validation,
    run creation and measurements run in children)."""
    script = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
os.environ["KFORGE_DB"] = {str(tmp_path / "runs.db")!r}
os.environ["KFORGE_SETTINGS"] = {str(tmp_path / "settings.toml")!r}
from kforge_core.store import open_store
from tests.browser.seed import seed_finished_run, seed_live_run, seed_unsupported_run
with open_store() as s:
    done, live = seed_finished_run(s), seed_live_run(s)
from tests.browser.appkit import app
for page, query in ((None, {{}}), (None, {{"run": done}}), (None, {{"run": live}}), ("runs", {{}}),
                    ("compare", {{"a": done + ":1"}}), ("settings", {{}})):
    at = app(page, **query).run()
    assert not at.exception, (page, at.exception)
print("torch imported:", "torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch imported: False" in out.stdout


def test_measure_now_runs_in_a_child_and_fills_the_ceilings(app_env, use_targets):
    at = app("settings").run()
    at.button(key="kf-measure-cpu").click().run()
    assert not at.exception
    assert any(s.value == "Measured." for s in at.success), [e.value for e in at.error]
    values = {m.label: m.value for m in at.metric}
    assert values["Memory bandwidth"].endswith("GB/s") and values["fp32 peak"].endswith("TFLOP/s")
    assert json.loads((app_env / "cache" / "ceilings" / "ceilings.json").read_text())  # the roofline's own cache


def test_interrupted_run_offers_resume(app_env, use_targets):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with open_store() as s:
        run_id = seed_live_run(s, pid=dead.pid)
    at = app(run=run_id).run()
    assert not at.exception
    assert "interrupted" in texts(at)
    assert any(b.label == "Resume" for b in at.button)
    assert not any(b.label == "Cancel run" for b in at.button)


def test_runs_page_shows_and_filters_unsupported_runs(app_env, use_targets):
    with open_store() as s:
        seed_finished_run(s, problem_name="swish_bias")
        seed_unsupported_run(s, problem_name="cumsum_scan")
    at = app("runs").run()
    assert not at.exception and "unsupported" in texts(at)
    at.multiselect(key="kf-runs-status").set_value(["unsupported"]).run()
    body = texts(at)
    assert "cumsum_scan" in body and "swish_bias" not in body


# --------------------------------------------------------------------------------------------------- Benchmark

def test_benchmark_page_shows_a_bench_report(app_env, tmp_path, monkeypatch):
    from kforge_core.bench.report import write_reports

    records = [
        {"problem": "level1/01_relu", "level": 1, "status": "succeeded", "correct": True, "speedup_vs_eager": 2.5,
         "speedup_vs_compiled": 1.25, "candidate_ms": 4.0, "eager_ms": 10.0, "compiled_ms": 5.0},
        {"problem": "level2/09_logsumexp", "level": 2, "status": "failed", "correct": False,
         "error": "no correct program"},
        {"problem": "level2/01_linear_bias_gelu", "level": 2, "status": "succeeded", "correct": True,
         "speedup_vs_eager": 0.74, "speedup_vs_compiled": 0.7, "candidate_ms": 4.0, "eager_ms": 2.96},
    ]
    write_reports(tmp_path / "out", records, {"target": "cpu", "agent": "builtin"})
    monkeypatch.setenv("KFORGE_BENCH_DIR", str(tmp_path / "out"))
    at = app("benchmark").run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Correct"] == "2/3" and metrics["fast_1 vs eager"] == "33%"
    # correct but slower than eager: counted apart, in words
    assert [w.value for w in at.warning if "slower than eager" in w.value] == [
        "1 of the 2 correct problems are **slower than eager PyTorch**: correct, but no kernel beats eager there "
        "(their measured speedups, below 1×, are counted as they are)."]
    tables = " ".join(str(df.value.to_dict()) for df in at.dataframe)
    assert "level1/01_relu" in tables and "level2/09_logsumexp" in tables
    assert "failures counted as 1.0" in tables and "fast_1" in tables
    assert len(at.get("plotly_chart")) == 2
    assert not [w for w in at.warning if "noise bounds" in w.value]  # none of these was measured noisy


def test_benchmark_page_says_which_speedups_were_measured_noisy(app_env, tmp_path, monkeypatch):
    from kforge_core.bench.report import write_reports

    noise = "noisy timing (eager, median 4.07 ms is 8.0x its fastest trial (0.511 ms; bound 1.3x) over 25 trials)"
    records = [{"problem": "level2/12_Gemm_Multiply_LeakyReLU", "level": 2, "status": "succeeded", "correct": True,
                "speedup_vs_eager": 6.57, "candidate_ms": 0.62, "eager_ms": 4.07, "noise": [noise]},
               {"problem": "level1/19_ReLU", "level": 1, "status": "succeeded", "correct": True,
                "speedup_vs_eager": 1.02, "candidate_ms": 0.106, "eager_ms": 0.108, "noise": []}]
    write_reports(tmp_path / "out", records, {"target": "cpu", "agent": "builtin"})
    monkeypatch.setenv("KFORGE_BENCH_DIR", str(tmp_path / "out"))
    at = app("benchmark").run()
    assert not at.exception
    assert [w.value for w in at.warning if "noise bounds" in w.value] == [
        "1 of the 2 correct problems have speedups **measured beyond the noise bounds** (the machine was busy or "
        "the timing unstable): see their `noise` column and re-time before trusting those numbers."]
    (problems,) = [df.value for df in at.dataframe if "problem" in df.value.columns]
    by_problem = dict(zip(problems["problem"], problems["noise"]))
    assert by_problem == {"level2/12_Gemm_Multiply_LeakyReLU": noise, "level1/19_ReLU": ""}
    assert "speedups measured noisy 1" in texts(at)


def test_benchmark_page_shows_outcomes_reasons_and_a_partial_result(app_env, tmp_path, monkeypatch):
    from kforge_core.bench.report import write_reports

    records = [
        {"problem": "level1/19_ReLU", "level": 1, "kind": "elementwise", "status": "succeeded", "correct": True,
         "speedup_vs_eager": 1.5, "speedup_vs_compiled": 0.8, "coverage": "1 of 1 nodes (100%) synthesized"},
        {"problem": "level1/89_cumsum", "level": 1, "kind": "scan", "status": "unsupported", "correct": False,
         "last_status": "no_program", "reason": "nothing to synthesize: no node has a kernel template (cumsum)"},
        {"problem": "level1/26_GELU_", "level": 1, "kind": "elementwise", "status": "failed", "correct": False,
         "last_status": "runtime_error", "reason": "RuntimeError: out of memory (allocating 6 GiB)"},
    ]
    write_reports(tmp_path / "out", records, {"target": "cpu", "partial": True, "suite_problems": 10,
                                              "not_run": 7, "stopped_by": "time limit of 600 s reached"})
    monkeypatch.setenv("KFORGE_BENCH_DIR", str(tmp_path / "out"))
    at = app("benchmark").run()
    assert not at.exception
    assert any("7 of 10 problems not run" in w.value for w in at.warning)
    assert "correct 1/3 · failed 1 · unsupported 1 (supported 2)" in texts(at)
    tables = " ".join(str(df.value.to_dict()) for df in at.dataframe)
    assert "RuntimeError: out of memory (allocating 6 GiB)" in tables and "runtime_error" in tables
    assert "nothing to synthesize: no node has a kernel template (cumsum)" in tables
    assert "1 of 1 nodes (100%) synthesized" in tables and "scan" in tables and "unsupported" in tables


def test_benchmark_page_explains_a_bad_folder(app_env, tmp_path, monkeypatch):
    monkeypatch.delenv("KFORGE_BENCH_DIR", raising=False)
    at = app("benchmark").run()
    at.text_input(key="kf-bench-dir").set_value(str(tmp_path / "nowhere")).run()
    assert not at.exception
    assert "No results.json" in texts(at)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("{not json")
    at.text_input(key="kf-bench-dir").set_value(str(tmp_path / "bad")).run()
    assert not at.exception and "is not a KForge benchmark result" in texts(at)


def test_settings_saves_the_ray_cluster_address(app_env, use_targets, monkeypatch):
    monkeypatch.delenv("KFORGE_RAY_ADDRESS", raising=False)
    path = app_env / "settings.toml"
    at = app("settings").run()
    at.text_input(key="kf-set-cluster").set_value("not an address")
    next(b for b in at.button if b.label == "Save cluster").click().run()
    assert not at.exception and "Not saved" in texts(at) and not path.exists()
    at.text_input(key="kf-set-cluster").set_value("ray://head:10001")
    next(b for b in at.button if b.label == "Save cluster").click().run()
    assert not at.exception
    assert tomllib.loads(path.read_text())["cluster"] == {"address": "ray://head:10001"}
    assert app("settings").run().text_input(key="kf-set-cluster").value == "ray://head:10001"


def test_benchmark_page_warns_about_mixed_devices(app_env, tmp_path, monkeypatch):
    from kforge_core.bench.report import write_reports

    records = [{"problem": p, "level": 1, "status": "succeeded", "correct": True, "speedup_vs_eager": s,
                "node": n, "device": d} for p, s, n, d in (("a", 2.0, "gpu-1", "NVIDIA H100"),
                                                          ("b", 0.5, "gpu-2", "NVIDIA A10G"))]
    write_reports(tmp_path / "out", records, {"target": "cuda", "executor": "ray"})
    monkeypatch.setenv("KFORGE_BENCH_DIR", str(tmp_path / "out"))
    at = app("benchmark").run()
    assert not at.exception
    assert any("2 kinds of device" in w.value for w in at.warning)
    tables = " ".join(str(df.value.to_dict()) for df in at.dataframe)
    assert "NVIDIA A10G" in tables and "gpu-2" in tables


def test_run_view_says_when_the_best_was_measured_noisy(app_env, use_targets):
    """The best's speedups came from a head-to-head whose eager timing was 8x its fastest trial: the run view says
    so under its title, naming the timing; the same run without that contest (its own verdict steady) says nothing."""
    with open_store() as s:
        steady = seed_finished_run(s, problem_name="steady")
        noisy = seed_finished_run(s, problem_name="noisy")
        s.append_event(noisy, "head_to_head", {
            "contenders": [{"iteration": 2, "candidate_ms": 1.25, "min_ms": 1.2, "max_ms": 1.4, "trials": 25,
                            "speedup_vs_eager": 3.26}],
            "eager": {"median_ms": 4.07, "min_ms": 0.511, "max_ms": 8.2, "trials": 25},
            "compiled": {"median_ms": 2.5, "min_ms": 2.4, "max_ms": 2.7, "trials": 25}, "best_iteration": 2})
    at = app(run=noisy).run()
    assert not at.exception
    (warning,) = [w.value for w in at.warning if "noise bounds" in w.value]
    assert warning.startswith("The best's speedups were measured beyond the noise bounds") and \
        "noisy timing (eager, median 4.07 ms is 8.0x its fastest trial" in warning
    at = app(run=steady).run()
    assert not at.exception and not [w for w in at.warning if "noise bounds" in w.value]
    with open_store() as s:  # no contest: the best's own verdict was the noisy one
        own = seed_finished_run(s, problem_name="own")
        s.append_event(own, "verdict", {"iteration": 2, "verdict": {
            "status": "correct", "target": "cpu", "candidate_ms": 1.25, "warnings": [
                "noisy timing (candidate, median 1.25 ms is 2.1x its fastest trial (0.6 ms; bound 1.3x) over 30 "
                "trials): re-time"]}}, 2)
    at = app(run=own).run()
    assert [w.value for w in at.warning if "noise bounds" in w.value][0].endswith(
        "noisy timing (candidate, median 1.25 ms is 2.1x its fastest trial (0.6 ms; bound 1.3x) over 30 trials): "
        "re-time")
