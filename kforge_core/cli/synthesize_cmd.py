"""`synthesize`: run the agents' loop on one problem for one target, recording the run in the store."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..errors import UsageError
from ..store import open_store, resolve_db_path
from ..eval.tolerance import POLICIES
from ..formatting import fmt_ms, fmt_x
from .common import add_timing_options, print_json, timing_options_from_args
from .head_to_head_text import head_to_head_lines

if TYPE_CHECKING:  # the loop (and the openai package under it) is imported only when a run starts
    from ..loop import RunConfig
    from ..loop.events import LoopEvent

EXIT_ENDPOINT = 3  # the model endpoint stopped the run
NO_ENDPOINT_NOTE = "no LLM endpoint configured: using the built-in, rule-based synthesizer (no LLM)"


def register(sub) -> None:
    p = sub.add_parser(
        "synthesize", help="generate, check and optimize a custom-kernel program for a problem (the agents' loop)",
        description="Runs the functional pass (until a candidate is correct) and then the optimization pass "
                    "(profile, analyse, regenerate, keep the fastest correct program). Progress goes to stderr. "
                    "With --json one JSON object (run_id, status, best, iterations) is printed on stdout at the end; "
                    "without it the best program's code is printed on stdout. Every step is recorded in the run "
                    "store (see `runs`). Exit code 0 whenever the run finished, with or without a correct program; "
                    "2 for usage errors and unreachable endpoints (an unknown model included); 3 when the model "
                    "endpoint stopped the run (a refusal, or failing too long: the best program so far is kept and "
                    "printed; resume the run later); 130 after Ctrl-C (the run is recorded as cancelled).")
    p.add_argument("--problem", help="KernelBench-format problem file (Model, get_inputs, get_init_inputs)")
    p.add_argument("--target", help="target platform (see `platforms`)")
    add_run_options(p)
    p.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted run instead of starting one "
                                                        "(the stored config is used; flags given here override it)")
    p.set_defaults(handler=run)


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Flags shared with `runs resume`. Defaults are None so that a resume can tell what was given."""
    agent = p.add_argument_group("agents and model endpoint")
    agent.add_argument("--agent", choices=("llm", "builtin"),
                       help="llm (an OpenAI-compatible endpoint) or builtin (rule-based, no LLM); default: llm when "
                            "an endpoint is configured (flags, OPENAI_BASE_URL / OPENAI_API_KEY, settings file)")
    agent.add_argument("--model", help="generation model (default: KFORGE_MODEL or the settings file)")
    agent.add_argument("--analysis-model", help="performance-analysis model (default: the generation model)")
    agent.add_argument("--base-url", help="OpenAI-compatible API root, e.g. http://localhost:8000/v1")
    agent.add_argument("--api-key", help="API key (better: OPENAI_API_KEY); never stored")
    agent.add_argument("--endpoint-max-wait", type=float, metavar="S",
                       help="longest wait for a failing endpoint before the run stops to be resumed later (a 429's "
                            "Retry-After, or the doubling backoff; default 600 s)")
    agent.add_argument("--max-endpoint-failures", type=int, metavar="N",
                       help="failed model calls in a row (after the client's own retries) that stop the run "
                            "(default 5)")
    agent.add_argument("--context-tokens", type=int, metavar="N",
                       help="the model's context window in tokens, for servers that do not publish it (Ollama: its "
                            "OLLAMA_CONTEXT_LENGTH); default: GET /models, else [llm] context_tokens, else 32768")
    budget = p.add_argument_group("budgets")
    budget.add_argument("--max-functional-iters", type=int, metavar="N", help="functional-pass steps (default 5)")
    budget.add_argument("--max-optimization-iters", type=int, metavar="M",
                        help="optimization-pass steps (default 5; 0: stop at the first correct program)")
    budget.add_argument("--max-wall-s", type=float, metavar="S", help="wall-clock budget of the run, seconds")
    budget.add_argument("--max-tokens", type=int, metavar="T", help="token budget (prompt + completion, all calls)")
    budget.add_argument("--patience", type=int, metavar="K",
                        help="stop after K optimization steps without a faster program (default 3; 0: never); "
                             "with --agent builtin, not while the best is slower than eager")
    budget.add_argument("--best-of", type=int, metavar="K", help="candidates per step, generated in parallel "
                                                                  "(default 1)")
    more = p.add_argument_group("inputs and evaluation")
    more.add_argument("--reference-program", metavar="FILE", help="a working program for another target")
    more.add_argument("--reference-target", metavar="T", help="the target --reference-program is for")
    more.add_argument("--reference-run", metavar="RUN_ID",
                      help="use a stored run's best program (and its target) as the cross-platform reference")
    more.add_argument("--screenshot", action="append", metavar="PNG", help="profiler screenshot (PNG/JPEG) for the "
                                                                         "analysis agent; repeatable")
    more.add_argument("--screenshots-of", type=int, metavar="ITER",
                      help="the iteration whose program the screenshots show (they go only to its analysis); "
                           "default: taken before the run, sent with the first analysis only")
    more.add_argument("--tolerance", choices=sorted(POLICIES), help="tolerance policy (default: default)")
    more.add_argument("--size-class", choices=("cpu", "gpu"),
                      help="a gallery problem's size class (default: cpu on CPU targets when the problem declares "
                           "CPU_SIZES, as `bench` does; else the file's own sizes)")
    more.add_argument("--eval-timeout", type=float, metavar="S", help="wall-clock limit of one evaluation "
                                                                      "(default 300 s)")
    add_timing_options(more)
    more.add_argument("--no-baselines", action="store_true", default=None,
                      help="do not time torch.compile next to each correct candidate (faster; no speedup vs "
                           "torch.compile is reported)")
    out = p.add_argument_group("output")
    out.add_argument("--db", help="run store (default: $KFORGE_DB or ~/.local/share/kforge/runs.db)")
    out.add_argument("--json", action="store_true", help="print one JSON object on stdout at the end")
    out.add_argument("-v", "--verbose", action="store_true", help="also stream the models' tokens to stderr")


def overrides_from_args(args: argparse.Namespace) -> dict:
    """RunConfig fields given on the command line (None = not given)."""
    values = dict(agent=args.agent, model=args.model, analysis_model=args.analysis_model, base_url=args.base_url,
                  api_key=args.api_key, max_functional_iters=args.max_functional_iters,
                  max_optimization_iters=args.max_optimization_iters, max_wall_s=args.max_wall_s,
                  max_total_tokens=args.max_tokens, patience=args.patience, best_of_k=args.best_of,
                  reference_target=args.reference_target, screenshots=args.screenshot, tolerance=args.tolerance,
                  size_class=args.size_class, eval_timeout_s=args.eval_timeout,
                  screenshots_of=args.screenshots_of,
                  endpoint_max_wait_s=args.endpoint_max_wait,
                  max_endpoint_failures=args.max_endpoint_failures,
                  eval_baselines=False if args.no_baselines else None)
    if args.reference_program:
        values["reference_program"] = _read(args.reference_program, "reference program")
    if args.context_tokens is not None:
        values["llm_options"] = {"context_tokens": args.context_tokens}
    values["eval_timing_options"] = timing_options_from_args(args) or None
    return {k: v for k, v in values.items() if v is not None}


def _reference_from_run(store, args: argparse.Namespace) -> dict:
    """--reference-run: the stored run's best program and its target, as the cross-platform reference."""
    run_id = getattr(args, "reference_run", None)
    if not run_id:
        return {}
    if args.reference_program or args.reference_target:
        raise UsageError("give --reference-run, or --reference-program with --reference-target, not both")
    ref = store.get_run(run_id)
    if ref.get("best_iteration") is None:
        raise UsageError(f"run {run_id} has no correct program to use as a reference (status {ref['status']})")
    best = store.get_iteration(run_id, ref["best_iteration"])
    return {"reference_program": best["code"], "reference_target": ref["target"]}


def run(args: argparse.Namespace) -> int:
    from ..loop import RunConfig, create_run

    db = resolve_db_path(args.db)
    with open_store(db) as store:
        store.mark_interrupted_runs()
        if args.resume:
            if args.problem or args.target:
                raise UsageError("--resume continues a stored run: leave out --problem and --target")
            config = RunConfig.from_run(store.get_run(args.resume), **overrides_from_args(args))
            run_id = args.resume
        else:
            if not args.problem or not args.target:
                raise UsageError("synthesize needs --problem FILE and --target NAME (or --resume RUN_ID)")
            problem_path = Path(args.problem)
            config = RunConfig(problem_source=_read(problem_path, "problem file"), problem_name=problem_path.stem,
                               target=args.target, **overrides_from_args(args), **_reference_from_run(store, args))
            if config.size_class is None:
                config.size_class = default_size_class(config.problem_source, config.target)
            run_id = None
        notes = prepare_agent(config, explicit_agent=args.agent is not None or bool(args.resume))
        if run_id is None:
            run_id = create_run(store, config)
        else:
            store.update_run(run_id, config=config.to_record())
    return execute_and_report(db, run_id, config, args, notes, resume=bool(args.resume))


def default_size_class(problem_source: str, target: str) -> str | None:
    """"cpu" on a CPU target for a problem that declares CPU_SIZES (its file sizes are for GPUs: a candidate run at
    them on a CPU runs out of memory or time, correct or not); None (the file's sizes) otherwise."""
    from ..agents.facts import evaluated_sizes
    from ..platform import get_platform

    try:
        platform = get_platform(target)
    except Exception:  # noqa: BLE001 - an unknown target is reported by the run's own validation, with its hint
        return None
    if platform.device_type == "cpu" and evaluated_sizes(problem_source, "cpu"):
        return "cpu"
    return None


def prepare_agent(config: RunConfig, explicit_agent: bool) -> list[str]:
    """Pick the default agent and check the endpoint before anything is recorded. Returns notes to show."""
    from ..agents.factory import llm_config_for
    from ..llm import check_endpoint
    from ..llm.endpoint import is_served

    notes = []
    llm_cfg = llm_config_for(config)
    if not explicit_agent and config.agent == "llm" and not llm_cfg.is_configured:
        config.agent = "builtin"
        notes.append(NO_ENDPOINT_NOTE)
        print(NO_ENDPOINT_NOTE, file=sys.stderr)
    config.validate()
    if config.agent == "builtin":
        from ..agents.factory import build_agents

        build_agents(config)  # a missing built-in agent is a usage error now, not a failed run later
        return notes
    if not llm_cfg.model:
        raise UsageError(f"no model set for the LLM endpoint {llm_cfg.endpoint}: give --model (or KFORGE_MODEL, "
                         "or [llm] model in the settings file)")
    check = check_endpoint(llm_cfg, timeout_s=min(20.0, llm_cfg.timeout_s), test_call=False)
    if not check.ok:
        raise UsageError(f"cannot use the LLM endpoint {llm_cfg.endpoint}: {check.error}")
    if check.models:  # a server that lists its models: an unknown one would only fail the run later
        unknown = [m for m in dict.fromkeys((llm_cfg.model_for("generation"), llm_cfg.model_for("analysis")))
                   if m and not is_served(m, check.models)]
        if unknown:
            served = ", ".join(check.models[:20]) + (" ..." if len(check.models) > 20 else "")
            raise UsageError(f"the LLM endpoint {llm_cfg.endpoint} does not serve model(s) "
                             f"{', '.join(repr(m) for m in unknown)}; it serves: {served}")
    for note in check.notes:
        print(f"note: {note}", file=sys.stderr)
        notes.append(note)
    return notes


def execute_and_report(db: Path, run_id: str, config: RunConfig, args: argparse.Namespace, notes: list[str],
                       resume: bool) -> int:
    from ..loop import execute_run, summarize_run

    printer = ProgressPrinter(sys.stderr, verbose=args.verbose)
    print(f"run {run_id}: {config.problem_name} on {config.target}, agent {config.agent}"
          f"{' (' + config.model + ')' if config.agent == 'llm' and config.model else ''}; store {db}",
          file=sys.stderr)
    interrupted = []

    def on_sigint(signum, frame):  # noqa: ARG001 - the loop turns this into a cancelled run
        interrupted.append(True)
        raise KeyboardInterrupt()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        execute_run(db, run_id, config, on_event=printer, resume=resume)
    finally:
        signal.signal(signal.SIGINT, previous)
    with open_store(db) as store:
        summary = summarize_run(store, run_id)
    summary["stop_reason"] = printer.stop_reason
    summary["notes"] = notes
    print(final_line(summary, printer.printed_errors), file=sys.stderr)
    if args.json:
        print_json(summary)
    elif summary["best"]:
        sys.stdout.write(summary["best"]["code"])
    if interrupted:
        return 130
    return EXIT_ENDPOINT if printer.endpoint_failure else 0


def final_line(summary: dict, printed_errors: set[str] | frozenset[str] = frozenset()) -> str:
    """The run's last line; an error already printed as it happened is not repeated."""
    best = summary["best"]
    line = f"run {summary['run_id']} {summary['status']}"
    if best:
        line += (f": best is iteration {best['iteration']}, {fmt_ms(best['candidate_ms'])}, "
                 f"{fmt_x(best['speedup_vs_eager'])} vs eager")
        if best["speedup_vs_compiled"] is not None:
            line += f", {fmt_x(best['speedup_vs_compiled'])} vs torch.compile"
        if best.get("chosen_by"):
            line += f" [{best['chosen_by']}]"
        for warning in best.get("noise") or []:  # the numbers just reported, beyond the noise bounds
            line += f"\nwarning: {warning}"
        if best.get("warning"):  # a slowdown is never reported as a result without saying so
            line += f"\nwarning: {best['warning']}"
    elif summary.get("error") and not _already_printed(summary["error"], printed_errors):
        line += f": {summary['error']}"
    stop = summary.get("stop_reason")
    if stop and stop != summary.get("error") and not _already_printed(stop, printed_errors):
        line += f" (stopped: {stop})"
    elif stop and best and _already_printed(stop, printed_errors):
        line += " (stopped by the model endpoint: see above; resume the run later)"
    return line


def _already_printed(message: str, printed: set[str] | frozenset[str]) -> bool:
    return any(p and (message.startswith(p) or p.startswith(message)) for p in printed)


def _read(path: str | Path, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} not found: {p}")
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {what} {p}: {e}") from None


class ProgressPrinter:
    """Readable progress from loop events (one method per kind; kinds without one print nothing)."""

    def __init__(self, stream: TextIO, verbose: bool = False):
        self.stream, self.verbose = stream, verbose
        self.stop_reason = ""
        self.endpoint_failure = False
        self.printed_errors: set[str] = set()  # so that the final line does not repeat them
        self._missing: set[int] = set()  # iterations whose "no program" line is printed already
        self._mid_line = False  # tokens were written without a newline
        self._thinking = False  # the verbose stream is inside the model's thinking

    def __call__(self, event: LoopEvent) -> None:
        handler = getattr(self, "on_" + event.kind, None)
        if handler is not None:
            handler(event)

    def _line(self, text: str) -> None:
        if self._mid_line:
            self.stream.write("\n")
            self._mid_line = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def on_tokens(self, e) -> None:
        if not self.verbose:
            return
        thinking = bool(getattr(e, "thinking", False))
        if thinking != self._thinking:  # mark where the thinking starts and ends (it is not the answer)
            self._line("  [thinking]" if thinking else "  [answer]")
            self._thinking = thinking
        self.stream.write(e.text)
        self.stream.flush()
        self._mid_line = not e.text.endswith("\n")

    def on_retry(self, e) -> None:
        where = f"[{e.iteration}] " if e.iteration is not None else ""
        if e.where == "loop":
            self._line(f"  {where}waiting {e.delay_s:.3g} s for the model endpoint before the next step "
                       f"(failure {e.attempt} in a row)")
        else:
            self._line(f"  {where}model endpoint: {e.error}; retrying in {e.delay_s:.3g} s (attempt "
                       f"{e.attempt + 1})")

    def on_usage(self, e) -> None:
        if getattr(e, "warning", ""):
            self._line(f"  [{e.iteration}] warning: {e.warning}")

    def on_pass_started(self, e) -> None:
        self._line(f"{e.pass_name} pass: up to {e.max_iterations} step(s)")

    def on_prompt_sent(self, e) -> None:
        what = "analysing the best program" if e.agent == "analysis" else "generating"
        self._line(f"  [{e.iteration}] {what} ({e.model})…")

    def on_program_missing(self, e) -> None:
        if e.error not in self.printed_errors:  # an endpoint failure was printed as an error already
            self._missing.add(e.iteration)
            self._line(f"  [{e.iteration}] no program: {e.error}")

    def on_program_extracted(self, e) -> None:
        if e.notes:
            self._line(f"  [{e.iteration}] note: {e.notes}")

    def on_recommendations(self, e) -> None:
        titles = "; ".join(r.title for r in e.recommendations) or "none"
        self._line(f"  [{e.iteration}] {len(e.recommendations)} recommendation(s): {titles}")
        if e.notes:
            self._line(f"  [{e.iteration}] note: {e.notes}")

    def on_error(self, e) -> None:
        where = f"[{e.iteration}] " if e.iteration is not None else ""
        self._line(f"  {where}error ({e.where}): {e.message}")
        self.printed_errors.add(e.message)

    def on_iteration_finished(self, e) -> None:
        if e.reason and any(e.reason.startswith(p) for p in self.printed_errors):
            self._line(f"  [{e.iteration}] {e.status}: (the endpoint error above)")
            return
        if e.status == "no_program" and e.iteration in self._missing:
            return  # said by on_program_missing, with the same reason
        if e.status == "correct":
            detail = f"{fmt_ms(e.candidate_ms)}  {fmt_x(e.speedup_vs_eager)} vs eager"
            if e.speedup_vs_compiled is not None:
                detail += f"  {fmt_x(e.speedup_vs_compiled)} vs torch.compile"
        else:
            detail = e.reason.splitlines()[0] if e.reason else ""
            if len(detail) > 300:
                detail = detail[:299] + "…"
        self._line(f"  [{e.iteration}] {e.status}: {detail}")

    def on_eval_stage(self, e) -> None:
        where = f"[{e.iteration}] " if e.iteration is not None else ""
        self._line(f"  {where}… {e.stage}")

    def on_head_to_head(self, e) -> None:
        for line in head_to_head_lines(e.data()):
            self._line(line)

    def on_best_updated(self, e) -> None:
        self._line(f"  [{e.iteration}] new best: {fmt_ms(e.candidate_ms)}")

    def on_run_finished(self, e) -> None:
        self.stop_reason = e.stop_reason
        self.endpoint_failure = bool(getattr(e, "endpoint_failure", False))
