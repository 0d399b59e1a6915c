"""The Synthesize page's form: the problem, the target, the agents, the budgets, an optional cross-platform reference
and profiler screenshots; then start the run in a worker process.

Everything a user can get wrong is checked here and reported in place, in one sentence: a module that does not
parse or lacks `Model`/`get_inputs`/`get_init_inputs` (with the line), an unavailable target, an unreachable endpoint
or a refused key, an image that is not PNG/JPEG. The pasted module is only parsed here (`load_problem`); running it
("Check by running the reference") happens in an evaluation child, never in this process.
"""

from __future__ import annotations

import ast
import secrets
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import streamlit as st

from kforge_core.errors import ProblemError
from kforge_core.gallery import list_problems
from kforge_core.llm import LLMConfig, LLMConfigError, check_endpoint, sniff_image_type
from kforge_core.problem import Problem, load_problem
from kforge_core.pyast import parse_ast
from kforge_core.eval.tolerance import POLICIES

from . import services
from .highlight import to_html
from .run_view import BUILTIN_LABEL

PLACEHOLDER = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


def get_inputs():
    return [torch.randn(1024, 1024)]


def get_init_inputs():
    return []
'''
# Errors from the endpoint check that make a run pointless: it would fail on its first call.
BLOCKING_ENDPOINT_ERRORS = ("LLMAuthError", "LLMConnectionError", "LLMTimeoutError", "LLMConfigError")
ENDPOINT_CHECK_TIMEOUT_S = 8.0
VALIDATE_TIMEOUT_S = 120.0
START_TIMEOUT_S = 120.0


@dataclass
class ProblemChoice:
    problem: Problem | None
    error: str | None = None
    error_line: int | None = None
    has_cpu_sizes: bool = False


GALLERY_LEVELS_HELP = ("Level 1: single operators; level 2: a matrix product or convolution with elementwise "
                       "epilogues (fusion problems); level 3: small blocks of several layers.")


def cpu_sizes(source: str) -> dict[str, Any]:
    """A gallery module's `CPU_SIZES` literal (the sizes the CPU target uses), read statically; {} if none."""
    try:
        tree = parse_ast(source)
    except SyntaxError:
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CPU_SIZES" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return value if isinstance(value, dict) else {}
    return {}


def has_cpu_sizes(source: str) -> bool:
    """Whether the module defines a gallery-style `CPU_SIZES` dict (the "cpu" size class), read statically."""
    try:
        tree = parse_ast(source)
    except SyntaxError:
        return False
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if any(isinstance(t, ast.Name) and t.id == "CPU_SIZES" for t in targets):
            return True
    return False


def check_problem(source: str, name: str | None = None) -> ProblemChoice:
    """The static checks of the foundation (`load_problem`), as a value the page can show."""
    try:
        problem = load_problem(text=source, name=name or None)
    except ProblemError as exc:
        return ProblemChoice(None, str(exc), exc.line)
    return ProblemChoice(problem, has_cpu_sizes=has_cpu_sizes(source))


def _snippet(source: str, line: int, context: int = 2) -> str:
    lines = source.splitlines()
    lo, hi = max(1, line - context), min(len(lines), line + context)
    width = len(str(hi))
    return "\n".join(f"{'>' if n == line else ' '} {n:>{width}} | {lines[n - 1]}" for n in range(lo, hi + 1))


# --------------------------------------------------------------------------------------------------- problem

def problem_section() -> ProblemChoice | None:
    st.markdown("##### 1 · The PyTorch module")
    mode = st.segmented_control("Where the module comes from", ["Paste", "Gallery", "Upload"], default="Paste",
                                required=True, key="kf-problem-mode", persist_state="session",
                                label_visibility="collapsed")
    source, name = "", None
    if mode == "Paste":
        st.button("Insert an example", icon=":material/lightbulb:", key="kf-example", on_click=_insert_example,
                  help="the CPU target's single-shot example: swish with a bias")
        source = st.text_area("Paste a KernelBench-format module: `class Model(nn.Module)`, `get_inputs()`, "
                              "`get_init_inputs()`", height=300, key="kf-paste", placeholder=PLACEHOLDER,
                              persist_state="session")
        name = st.text_input("Name (optional)", key="kf-paste-name", persist_state="session",
                             placeholder="e.g. relu_times_two").strip() or None
    elif mode == "Gallery":
        gallery = list_problems()
        if not gallery:
            st.warning("The gallery is empty (assets/problems/ is missing).")
            return None
        levels = sorted({p.level for p in gallery})
        level = st.segmented_control("Level", levels, default=levels[0], required=True, key="kf-gallery-level",
                                     persist_state="session", format_func=lambda lv: f"Level {lv} "
                                     f"({sum(p.level == lv for p in gallery)})",
                                     help=GALLERY_LEVELS_HELP)
        by_name = {p.name: p for p in gallery if p.level == level}

        def describe(n: str) -> str:
            p = by_name[n]
            return p.title + (f" — {p.description}" if p.description else "")

        picked = st.selectbox("Gallery problem", list(by_name), key=f"kf-gallery:{level}", persist_state="session",
                              format_func=describe)
        problem = by_name[picked]
        source, name = problem.source, picked.replace("/", "_")
        sizes = cpu_sizes(source)
        if sizes:
            st.caption("Sizes: on the CPU target (problem sizes \"auto\") its `CPU_SIZES`, "
                       + ", ".join(f"{k}={v}" for k, v in sizes.items())
                       + "; on GPU targets the file's own sizes (see the source).")
        with st.expander("Source"):
            st.html(to_html(source, "python"))
    else:
        upload = st.file_uploader("A .py file with Model, get_inputs and get_init_inputs", type=["py"],
                                  key="kf-upload")
        if upload is None:
            return None
        try:
            source = upload.getvalue().decode("utf-8")
        except UnicodeDecodeError:
            st.error(f"{upload.name} is not a UTF-8 text file.", icon=":material/error:")
            return None
        name = Path(upload.name).stem
    if not source.strip():
        st.caption("Paste a module to begin; it is checked as you go (parsed here, never run in this process).")
        return None
    choice = check_problem(source, name)
    if choice.problem is None:
        st.error(f"This module cannot be used: {choice.error}", icon=":material/error:")
        if choice.error_line:
            st.html(f'<div class="kf-code kf-log"><pre>{_escape(_snippet(source, choice.error_line))}</pre></div>')
    else:
        desc = f" — {choice.problem.description}" if choice.problem.description else ""
        st.success(f"**{choice.problem.name}**: Model, get_inputs and get_init_inputs found{desc}",
                   icon=":material/check_circle:")
    return choice


def _insert_example() -> None:
    from kforge_core.platform import EXAMPLES_DIR

    st.session_state["kf-paste"] = (EXAMPLES_DIR / "cpu" / "problem.py").read_text()
    st.session_state["kf-paste-name"] = "swish_bias"


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def reference_check(choice: ProblemChoice, target: services.TargetInfo | None, size_class: str | None,
                    builtin: bool = False) -> str | None:
    """Run the reference once in an evaluation child: inputs, outputs, time, and what only running can tell; with
    the built-in synthesizer chosen, also what it can write for this module. Returns what stands in the way of a
    run ("" when the check passed, None when it was not run): a reference that does not run fails every
    iteration, and so does a module the built-in synthesizer cannot write."""
    if choice.problem is None or target is None or not target.available:
        return None
    key = f"kf-validated:{choice.problem.digest}:{target.name}:{size_class}:{builtin}"
    if st.button("Check by running the reference", icon=":material/play_circle:", key="kf-validate",
                 help="Runs Model on get_inputs() once in a separate process on the chosen target"):
        from .child import ChildJobError, run_job

        with st.spinner(f"Running the reference on {target.title}…"):
            try:
                report = run_job("validate", {"source": choice.problem.source, "name": choice.problem.name,
                                              "target": target.name, "size_class": size_class,
                                              "timeout_s": VALIDATE_TIMEOUT_S, "builtin": builtin},
                                 timeout_s=VALIDATE_TIMEOUT_S * (2 if builtin else 1) + 30)
                st.session_state[key] = ("ok", report)
            except ChildJobError as exc:
                st.session_state[key] = ("error", str(exc))
    result = st.session_state.get(key)
    if result is None:
        if builtin:
            st.caption("The check also says what the built-in synthesizer can write for this module.")
        return None
    kind, value = result
    if kind == "error":
        st.error(f"Running the reference failed: {value}", icon=":material/error:")
        return "a reference that runs (the check by running it failed)"
    ms = f"{value['reference_ms']:.3g} ms per forward" if value.get("reference_ms") is not None else "time unknown"
    st.success(f"The reference runs: inputs {', '.join(value['inputs']) or '—'} → outputs "
               f"{', '.join(value['outputs']) or '—'}; {ms}.", icon=":material/check_circle:")
    for warning in value.get("warnings") or []:
        st.warning(warning, icon=":material/warning:")
    coverage = value.get("builtin") if builtin else None
    if coverage is not None:
        if not coverage.get("ok"):
            st.error(f"The built-in synthesizer cannot write this module: {coverage.get('text')}. Choose an LLM "
                     "endpoint, or a module it covers.", icon=":material/code_off:")
            return "a module the built-in synthesizer can write (or an LLM agent)"
        st.info(f"The built-in synthesizer will write: {coverage.get('text')}.", icon=":material/memory:")
    return ""


# --------------------------------------------------------------------------------------------------- target

def target_section() -> services.TargetInfo | None:
    st.markdown("##### 2 · Target")
    all_targets = services.targets()
    available = [t for t in all_targets if t.available]
    unavailable = [t for t in all_targets if not t.available]
    chosen = None
    if available:
        names = [t.name for t in available]
        by_name = {t.name: t for t in available}
        name = st.radio("Run and time the kernels on", names, key="kf-target", persist_state="session",
                        format_func=lambda n: by_name[n].title,
                        captions=[f"{t.device_name} · {t.reason}" for t in available])
        chosen = by_name.get(name)
    else:
        st.error("No target is available on this machine; see why below.", icon=":material/error:")
    if unavailable:
        missing = {t.name: t for t in unavailable}
        st.radio("Not available on this machine", [t.name for t in unavailable], index=None, disabled=True,
                 key="kf-target-unavailable", format_func=lambda n: missing[n].title,
                 captions=[t.reason for t in unavailable])
    return chosen


# --------------------------------------------------------------------------------------------------- agents

@dataclass
class AgentChoice:
    agent: str  # "builtin" | "llm"
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    analysis_model: str | None = None

    def llm_config(self) -> LLMConfig:
        return LLMConfig(base_url=self.base_url or None, api_key=self.api_key or None, model=self.model or None,
                         analysis_model=self.analysis_model or None)


def agent_section() -> AgentChoice:
    st.markdown("##### 3 · Agents")
    cfg, cfg_error = services.llm_defaults()
    if cfg_error:
        st.warning(f"{cfg_error}. Using the built-in synthesizer until it is fixed (Settings).",
                   icon=":material/warning:")
    configured = cfg is not None and cfg.is_configured
    labels = {"builtin": f"Built-in synthesizer ({BUILTIN_LABEL})",
              "llm": "LLM agents — an OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LM Studio, OpenRouter…)"}
    agent = st.radio("Who writes and analyses the kernels", list(labels), format_func=labels.get,
                     index=1 if configured else 0, key="kf-agent", persist_state="session",
                     captions=["Works offline with no API key: rule-based rewrites of common PyTorch patterns.",
                               "A generation agent writes programs; an analysis agent reads the profile and "
                               "recommends the next change."])
    if agent == "builtin":
        return AgentChoice("builtin")
    if not configured:
        st.info("No endpoint is configured yet: enter one here, or save defaults in Settings.",
                icon=":material/info:")
    c1, c2 = st.columns(2)
    base_url = c1.text_input("Endpoint (base URL)", value=(cfg.base_url or "") if cfg else "",
                             placeholder="https://api.openai.com/v1 or http://localhost:11434/v1", key="kf-base-url")
    saved_key = cfg.api_key if cfg else None
    typed_key = c2.text_input("API key", type="password", key="kf-api-key",
                              placeholder=f"saved key {services.mask_key(saved_key)} (leave empty to use it)"
                              if saved_key else "leave empty for local servers",
                              help="Used for this run only; never stored with the run.")
    c3, c4 = st.columns(2)
    model = c3.text_input("Generation model", value=(cfg.model or "") if cfg else "", key="kf-model",
                          placeholder="e.g. gpt-4o, qwen2.5-coder:32b")
    analysis = c4.text_input("Analysis model (empty: same as generation)",
                             value=(cfg.analysis_model or "") if cfg else "", key="kf-analysis-model")
    choice = AgentChoice("llm", base_url.strip() or None, typed_key.strip() or saved_key, model.strip() or None,
                         analysis.strip() or None)
    if st.button("Check endpoint", icon=":material/network_check:", key="kf-check-endpoint"):
        show_endpoint_check(choice, test_call=True)
    return choice


def show_endpoint_check(choice: AgentChoice, test_call: bool) -> bool:
    """Check the endpoint in place; True when a run could use it."""
    try:
        config = choice.llm_config()
    except LLMConfigError as exc:
        st.error(str(exc), icon=":material/error:")
        return False
    with st.spinner(f"Asking {config.endpoint}…"):
        result = check_endpoint(config, timeout_s=ENDPOINT_CHECK_TIMEOUT_S, test_call=test_call)
    if not result.ok:
        st.error(f"Endpoint check failed: {result.error}", icon=":material/cloud_off:")
        if result.models:
            st.caption("Models served there: " + ", ".join(f"`{m}`" for m in result.models[:30]))
        return result.error_type not in BLOCKING_ENDPOINT_ERRORS and bool(result.model)
    latency = f" in {result.latency_s:.2f} s" if result.latency_s is not None else ""
    st.success(f"{result.endpoint} answered{latency}; model `{result.model}`"
               + (" is listed" if result.model_listed else ""), icon=":material/cloud_done:")
    if result.models:
        st.caption(f"{len(result.models)} model(s) served there: " + ", ".join(f"`{m}`" for m in result.models[:40])
                   + (" …" if len(result.models) > 40 else ""))
    for note in result.notes:
        st.caption(note)
    return True


# --------------------------------------------------------------------------------------------------- budgets

def budget_section() -> dict[str, Any]:
    st.markdown("##### 4 · Budgets")
    c = st.columns(6)
    values = dict(
        max_functional_iters=c[0].number_input("Functional iterations", 1, 100, 5, key="kf-func-iters",
                                               persist_state="session",
                                               help="attempts to get a correct program"),
        max_optimization_iters=c[1].number_input("Optimization iterations", 0, 200, 5, key="kf-opt-iters",
                                                 persist_state="session",
                                                 help="attempts to make the correct program faster"),
        patience=c[2].number_input("Patience", 1, 50, 3, key="kf-patience", persist_state="session",
                                   help="stop optimizing after this many iterations without a new best"),
        best_of_k=c[3].number_input("Best of k", 1, 16, 1, key="kf-best-of-k", persist_state="session",
                                    help="programs generated per step; the best one is kept"),
    )
    minutes = c[4].number_input("Time limit (min)", 0, 24 * 60, 0, key="kf-wall-min", persist_state="session",
                                help="0 = no limit")
    tokens = c[5].number_input("Token limit", 0, 100_000_000, 0, step=10_000, key="kf-token-limit",
                               persist_state="session", help="prompt + completion tokens; 0 = no limit")
    values["max_wall_s"] = float(minutes * 60) if minutes else None
    values["max_total_tokens"] = int(tokens) if tokens else None
    st.caption(budget_text(values))
    return values


def budget_text(values: dict[str, Any]) -> str:
    """The budgets in words, with "no limit" where a 0 means none."""
    k = values["best_of_k"]
    steps = values["max_functional_iters"] + values["max_optimization_iters"]
    per_step = f" × {k} programs a step" if k > 1 else ""
    wall = values["max_wall_s"]
    tokens = values["max_total_tokens"]
    return (f"At most {steps * k} iterations ({values['max_functional_iters']} functional + "
            f"{values['max_optimization_iters']} optimization steps{per_step}); time: "
            f"{'no limit' if not wall else f'{wall / 60:g} min'}; "
            f"tokens: {'no limit' if not tokens else f'{tokens:,}'}.")


def advanced_section(choice: ProblemChoice | None, target: services.TargetInfo | None) -> dict[str, Any]:
    with st.expander("Evaluation settings"):
        c = st.columns(4)
        tolerance = c[0].selectbox("Tolerance policy", list(POLICIES), key="kf-tolerance", persist_state="session",
                                   help="see Settings → Tolerances")
        sizes = c[1].selectbox("Problem sizes", ["auto", "file's own sizes", "CPU sizes (CPU_SIZES)"],
                               key="kf-sizes", persist_state="session",
                               help="auto: a gallery problem's CPU_SIZES on a CPU target, the file's sizes elsewhere")
        timeout = c[2].number_input("Evaluation timeout (s)", 10, 3600, 300, key="kf-eval-timeout",
                                    persist_state="session")
        baselines = c[3].toggle("Time eager and torch.compile", value=True, key="kf-baselines",
                                persist_state="session",
                                help="the baselines every speedup is measured against")
        t = st.columns(3)
        min_trials = t[0].number_input("Min timed trials", 3, 1000, 10, key="kf-min-trials", persist_state="session")
        budget_s = t[1].number_input("Timing budget (s)", 0.1, 120.0, 2.0, key="kf-timing-budget",
                                     persist_state="session")
    size_class: str | None = None
    cpu_ok = bool(choice and choice.has_cpu_sizes)
    if sizes == "CPU sizes (CPU_SIZES)":
        if cpu_ok:
            size_class = "cpu"
        elif choice is not None and choice.problem is not None:
            st.warning("This module has no CPU_SIZES dict, so its own sizes are used.", icon=":material/warning:")
    elif sizes == "auto" and cpu_ok and target is not None and target.device_type == "cpu":
        size_class = "cpu"
    return dict(tolerance=tolerance, size_class=size_class, eval_timeout_s=float(timeout),
                eval_baselines=bool(baselines),
                eval_timing_options={"min_trials": int(min_trials), "budget_s": float(budget_s)})


# --------------------------------------------------------------------------------------------------- reference

def reference_section() -> tuple[str | None, str | None, str | None]:
    """(program, its target, error) for the optional cross-platform reference."""
    with st.expander("Cross-platform reference program (optional)"):
        st.caption("A program that already works on another target (say CUDA) gives the agents a head start on "
                   "this one (say Metal).")
        mode = st.segmented_control("Reference", ["None", "Paste", "Upload", "From a stored run"], default="None",
                                    required=True, key="kf-ref-mode", label_visibility="collapsed")
        if mode == "None":
            return None, None, None
        names = [t.name for t in services.targets()]
        titles = {t.name: t.title for t in services.targets()}
        if mode == "From a stored run":
            with services.store() as s:
                runs = [r for r in s.list_runs(limit=200) if r.get("best_iteration") is not None]
            if not runs:
                st.info("No stored run has a correct program yet.")
                return None, None, None
            by_id = {r["id"]: r for r in runs}
            run_id = st.selectbox("Run", list(by_id), key="kf-ref-run", format_func=lambda i: (
                f"{by_id[i]['problem_name']} on {by_id[i]['target']} — best #{by_id[i]['best_iteration']} "
                f"({(by_id[i].get('best_speedup_vs_eager') or 0):.2f}x) · {i}"))
            run = by_id[run_id]
            with services.store() as s:
                code = s.get_iteration(run_id, run["best_iteration"]).get("code")
            st.caption(f"Its best program, for target `{run['target']}`.")
            return code, run["target"], None if code else "that iteration has no stored program"
        if mode == "Paste":
            code = st.text_area("Reference program (a ModelNew module)", height=200, key="kf-ref-paste")
        else:
            upload = st.file_uploader("Reference program (.py)", type=["py"], key="kf-ref-upload")
            try:
                code = upload.getvalue().decode("utf-8") if upload is not None else ""
            except UnicodeDecodeError:
                return None, None, "the reference program is not a UTF-8 text file"
        ref_target = st.selectbox("It was written for", names, key="kf-ref-target", format_func=titles.get)
        if not code.strip():
            return None, None, None
        try:
            parse_ast(code)
        except SyntaxError as exc:
            return None, None, f"the reference program does not parse: line {exc.lineno}: {exc.msg}"
        return code, ref_target, None


def screenshots_section(agent: AgentChoice, target: services.TargetInfo | None) -> tuple[list[tuple[str, bytes]],
                                                                                          str | None]:
    """([(file name, bytes)], error) of profiler screenshots for the analysis agent."""
    with st.expander("Profiler screenshots for the analysis agent (optional)"):
        st.caption("PNG or JPEG captures of a GUI profiler (Nsight Compute, Xcode Instruments…). They are saved "
                   "with the run and sent to the analysis agent, which needs a vision-capable model.")
        disabled = agent.agent != "llm"
        if disabled:
            st.caption(":gray[The built-in synthesizer reads no images; choose LLM agents to send screenshots.]")
        uploads = st.file_uploader("Screenshots", type=["png", "jpg", "jpeg"], accept_multiple_files=True,
                                   key="kf-screenshots", disabled=disabled)
    shots = []
    for up in uploads or []:
        data = up.getvalue()
        if sniff_image_type(data) is None:
            return [], f"{up.name} is not a PNG or JPEG image"
        shots.append((up.name, data))
    return shots, None


def save_screenshots(shots: list[tuple[str, bytes]]) -> list[str]:
    """Write the screenshots into a fresh folder under the store's files folder; return their paths."""
    if not shots:
        return []
    folder = services.files_dir() / f"screenshots-{secrets.token_hex(6)}"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for n, (name, data) in enumerate(shots):
        safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in Path(name).name)[:80]
        path = folder / f"{n:02d}_{safe}"
        path.write_bytes(data)
        paths.append(str(path))
    return paths


# --------------------------------------------------------------------------------------------------- start

def build_config(loop, **values: Any) -> Any:
    """A validated RunConfig from the form's values (raises UsageError with every problem in one line)."""
    known = {f.name for f in fields(loop.RunConfig)}
    config = loop.RunConfig(**{k: v for k, v in values.items() if k in known})
    config.validate()
    return config


def start_run(config: Any) -> str:
    """Create the run and start its detached worker (the run goes on if this tab closes); return the run id.

    Done in a child process (`app.child start`): creating a run checks the target through platform discovery,
    which imports torch."""
    from dataclasses import asdict

    from .child import run_job

    answer = run_job("start", {"db": str(services.db_path()), "config": asdict(config)}, timeout_s=START_TIMEOUT_S)
    return answer["run_id"]
