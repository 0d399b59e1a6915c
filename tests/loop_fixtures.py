"""What the loop tests share: the tiny CPU problem and its programs, a fake OpenAI server serving a generation and an
analysis model, a run store file, a run configured against them and run to its end, and readers of its events.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kforge_core.agents.base import Usage
from kforge_core.eval.verdict import Timing, Verdict
from kforge_core.loop import RunConfig, Synthesis, create_run, execute_run, summarize_run
from kforge_core.store import open_store
from tests.fakes.openai_server import FakeOpenAIServer


FIXTURES = Path(__file__).parent / "fixtures_loop"
PROBLEM = (FIXTURES / "problem_relu.py").read_text()
FAST_TIMING = {"min_trials": 3, "max_trials": 5, "budget_s": 0.2}
SECRET = "sk-test-secret-key-0123456789"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
RECS = ('Measured: 400 repetitions per element.\n```json\n[{"title": "Drop the repeat loop", "change": "compute each '
        'element once", "why": "the kernel redoes the work 400 times", "expected_gain": "~100x"}]\n```')


@pytest.fixture(autouse=True)
def no_user_llm_settings(monkeypatch, tmp_path):
    """Only what a test configures: no endpoint, key or model from the developer's environment or settings."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KFORGE_MODEL", "KFORGE_ANALYSIS_MODEL", "KFORGE_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KFORGE_SETTINGS", str(tmp_path / "no-settings.toml"))


@pytest.fixture
def server():
    with FakeOpenAIServer(models=("gen-model", "ana-model")) as s:
        yield s


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "runs.db"


def program(name: str, prose: str = "Here is the program.") -> str:
    return f"{prose}\n```python\n{(FIXTURES / name).read_text()}```\n"


def make_config(server: FakeOpenAIServer, **kw) -> RunConfig:
    values = dict(problem_source=PROBLEM, problem_name="relu", target="cpu", model="gen-model",
                  analysis_model="ana-model", base_url=server.base_url, eval_baselines=False,
                  eval_timing_options=FAST_TIMING, max_functional_iters=3, max_optimization_iters=0,
                  llm_options={"timeout_s": 5.0, "max_retries": 1, "retry_base_delay_s": 0.01,
                               "retry_max_delay_s": 0.05}, endpoint_backoff_s=0.01)
    values.update(kw)
    return RunConfig(**values)


def run_to_end(db: Path, config: RunConfig) -> tuple[str, list, dict, list[dict]]:
    """Create and execute a run; return (run_id, loop events, summary, stored events)."""
    with open_store(db) as store:
        run_id = create_run(store, config)
    seen: list = []
    execute_run(db, run_id, config, on_event=seen.append)
    with open_store(db) as store:
        return run_id, seen, summarize_run(store, run_id), store.events(run_id)


def of_kind(events: list[dict], kind: str, **where) -> list[dict]:
    return [e for e in events if e["kind"] == kind and all(e["data"].get(k) == v for k, v in where.items())]


def generation_prompt(events: list[dict], iteration: int) -> str:
    (event,) = of_kind(events, "prompt_sent", iteration=iteration, agent="generation")
    return "\n".join(m["content"] if isinstance(m["content"], str) else
                     "\n".join(p.get("text", "") for p in m["content"]) for m in event["data"]["messages"])


def assert_consistent(summary: dict, events: list[dict]) -> None:
    """The JSON summary and the stored events tell the same story."""
    finished = {e["data"]["index"]: e["data"] for e in of_kind(events, "iteration_finished")}
    assert sorted(finished) == [it["index"] for it in summary["iterations"]]
    for it in summary["iterations"]:
        assert finished[it["index"]]["status"] == it["status"]
        assert finished[it["index"]]["pass"] == it["pass"]
        assert finished[it["index"]]["candidate_ms"] == it["candidate_ms"]
        verdicts = of_kind(events, "verdict", iteration=it["index"])
        missing = of_kind(events, "program_missing", iteration=it["index"])
        assert len(verdicts) + len(missing) <= 1
        if verdicts:
            assert verdicts[0]["data"]["verdict"]["status"] == it["status"]
    (done,) = of_kind(events, "run_finished")
    assert done["data"]["status"] == summary["status"]
    assert events[-1]["kind"] == "run_finished"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


# Issue 24's endpoint scenarios: the real LLM agents against the fake server, the real store, a scripted evaluator
# (these are about the loop's handling of the endpoint; real evaluations would only add seconds).


def scripted(ms: float | None = None, compile_error: bool = False, prose: str = "Here.") -> str:
    mark = "# compile_error" if compile_error else f"# ms={ms}"
    return f"{prose}\n```python\n{mark}\nclass ModelNew:\n    pass\n```\n"


def run_scripted(db: Path, config: RunConfig) -> tuple[str, list, dict, list[dict]]:
    """Like run_to_end, with the scripted evaluator."""
    from kforge_core.agents.factory import build_agents
    from kforge_core.loop.runs import StoreRecorder

    with open_store(db) as store:
        run_id = create_run(store, config)
        store.start_run(run_id)
        generation, analysis = build_agents(config)
        recorder, seen = StoreRecorder(store, run_id), []
        try:
            for event in Synthesis(config, generation, analysis, evaluate_fn=scripted_evaluate).events():
                recorder.record(event)
                seen.append(event)
        finally:
            recorder.close()
        return run_id, seen, summarize_run(store, run_id), store.events(run_id)


# A scripted evaluator: the loop's decisions (best, patience, budgets, best-of-k) do not depend on how a verdict
# was produced, and real evaluations would only add seconds.


class ScriptedAgent:
    """A generation/analysis agent without a model: replies are programs named by their median ms."""

    label = "scripted"

    def __init__(self, programs: list[str | None], tokens: int = 10):
        self.programs, self.tokens, self.calls = list(programs), tokens, []  # programs[i]: iteration i's reply
        self._lock = threading.Lock()

    def generate(self, request, on_token=None):
        from kforge_core.agents.base import GenerationResult

        with self._lock:  # best-of-k calls come from several threads at once
            self.calls.append(request)
        code = self.programs[request.iteration]  # by iteration: the threads' order is not deterministic
        if on_token:
            on_token(code or "nothing")
        return GenerationResult(program=code, reply_text=code or "", error=None if code else "no code block",
                                usage=Usage(self.tokens, self.tokens))

    def analyze(self, request, on_token=None):
        from kforge_core.agents.base import AnalysisResult, Recommendation

        self.calls.append(request)
        return AnalysisResult([Recommendation("Try", "something", "because")], text="try something",
                              usage=Usage(self.tokens, self.tokens))


def scripted_evaluate(problem, code, target, options):
    """`# ms=1.5` -> correct at 1.5 ms; `# wrong` -> incorrect."""
    if "# wrong" in code:
        return Verdict("incorrect", "values differ", target)
    if "# compile_error" in code:
        return Verdict("compile_error", "did not compile", target, compile_log="candidate line 2: error")
    ms = float(code.split("ms=")[1].split()[0])
    return Verdict("correct", "ok", target, candidate=Timing(ms, ms, ms, 3), eager=Timing(1.0, 1.0, 1.0, 3))


def synthesize(config: RunConfig, programs: list, **kw) -> tuple[list, ScriptedAgent]:
    agent = ScriptedAgent(programs)
    loop = Synthesis(config, agent, agent, evaluate_fn=scripted_evaluate, **kw)
    return list(loop.events()), agent


def offline_config(**kw) -> RunConfig:
    values = dict(problem_source=PROBLEM, problem_name="relu", target="cpu", agent="builtin",
                  max_functional_iters=3, max_optimization_iters=5, patience=2)
    values.update(kw)
    return RunConfig(**values)


def kinds(events: list, kind: str) -> list:
    return [e for e in events if e.kind == kind]


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
