"""`bench`: an agent over a suite of problems; writes results.json, results.csv and report.html."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..bench.metrics import counts_text, mixed_devices_note, partial_text
from ..errors import UsageError
from ..platform import get_platform
from ..eval.tolerance import POLICIES
from .common import print_json


def register(sub) -> None:
    p = sub.add_parser("bench", help="run an agent over a problem suite and report fast_p and speedups",
                       description="Suites: 'gallery', 'gallery:levelN', a directory in KernelBench's layout "
                                   "(level1/, level2/, ...), a directory of problem files, a text file listing "
                                   "problem paths or gallery names, or comma-separated gallery names. Problems run "
                                   "in a stratified order (one of every kind first, then each kind near its share "
                                   "of the suite), so a bench cut short is a representative sample. Re-running "
                                   "the same command with the same --out resumes where it stopped. Each problem "
                                   "ends correct, failed (with its last verdict and reason), unsupported (the "
                                   "agent cannot write it) or error (the problem file does not run).")
    p.add_argument("--suite", required=True, help="PATH_OR_NAME (see above)")
    p.add_argument("--level", type=int, help="only problems of this level")
    p.add_argument("--target", required=True)
    p.add_argument("--agent", choices=("llm", "builtin"), help="default: llm when an endpoint is configured")
    p.add_argument("--model", help="generation model (llm agent)")
    p.add_argument("--analysis-model", help="analysis model (llm agent; default: --model)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (default: OPENAI_BASE_URL or settings)")
    p.add_argument("--api-key", help="API key (default: OPENAI_API_KEY or settings; local servers need none)")
    p.add_argument("--out", required=True, help="output directory for results.json, results.csv, report.html")
    p.add_argument("--db", help="run store (default: KFORGE_DB or ~/.local/share/kforge/runs.db)")
    p.add_argument("--max-functional-iters", type=int, default=3)
    p.add_argument("--max-optimization-iters", type=int, default=3)
    p.add_argument("--best-of", type=int, default=1, metavar="K",
                   help="candidates per step (default 1); with --cluster each candidate's evaluation is a Ray task "
                        "of its own, so the K candidates are evaluated at once on K devices")
    p.add_argument("--size-class", choices=("cpu", "gpu"),
                   help="gallery problem sizes (default: cpu on the CPU target, the file's own sizes elsewhere)")
    p.add_argument("--tolerance", default="default", choices=sorted(POLICIES))
    p.add_argument("--no-baselines", action="store_true",
                   help="skip timing eager and torch.compile (speedups are then unknown)")
    p.add_argument("--devices", type=int, help="workers, one per device (default: every device the target sees)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="run each problem as a task on a Ray cluster: 'auto' (the cluster this machine joined with "
                        "`ray start`), 'ray://HOST:PORT' (Ray Client), 'HOST:PORT' (the head's GCS), or 'local' "
                        "(this machine; the default). Default: KFORGE_RAY_ADDRESS, else the settings file's "
                        "[cluster] address")
    p.add_argument("--cpus-per-task", type=float, default=1.0,
                   help="with --cluster and the CPU target: cores one problem asks for (default 1)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="start no new problem after SECONDS and stop the running one there (recorded as stopped at "
                        "the time limit); the results say they are partial, and re-running the same command goes "
                        "on, the stopped problem first")
    p.add_argument("--problem-time-limit", type=float, default=None, metavar="SECONDS",
                   help="stop a problem's run after SECONDS (its outcome: stopped at the time limit, left out of "
                        "the rates, run again by the same command); with --cluster too")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--min-custom-share", type=float, default=None, metavar="FRACTION",
                   help="count a correct candidate whose own kernels take less than this share of its forward's "
                        "time (0..1) as not faster than the baseline")
    p.set_defaults(handler=run)


def choose_agent(requested: str | None, base_url: str | None, api_key: str | None, model: str | None) -> str:
    if requested:
        return requested
    from ..llm import is_configured, resolve_config

    if is_configured(resolve_config(base_url=base_url, api_key=api_key, model=model)):
        return "llm"
    from .synthesize_cmd import NO_ENDPOINT_NOTE

    print(NO_ENDPOINT_NOTE, file=sys.stderr)
    return "builtin"


def run(args: argparse.Namespace) -> int:
    from ..agents.facts import size_class_for
    from ..bench.cluster import resolve_address
    from ..bench.runner import BenchConfig, run_bench

    if args.min_custom_share is not None and not 0 <= args.min_custom_share <= 1:
        raise UsageError(f"--min-custom-share must be a fraction between 0 and 1, got {args.min_custom_share:g}")
    if args.time_limit is not None and not args.time_limit > 0:
        raise UsageError(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
    if args.problem_time_limit is not None and not args.problem_time_limit > 0:
        raise UsageError(f"--problem-time-limit must be a positive number of seconds, got {args.problem_time_limit:g}")
    if args.best_of < 1:
        raise UsageError(f"--best-of must be at least 1, got {args.best_of}")
    cluster, _ = resolve_address(args.cluster)
    if cluster and args.time_limit is not None:
        raise UsageError("--time-limit is for this machine's executor; a bench on a Ray cluster runs to the end "
                         "(Ctrl-C stops it, and the same command resumes); --problem-time-limit caps each problem "
                         "there")
    if cluster and args.devices:
        raise UsageError("--devices is for this machine; on a cluster Ray places one problem per free device")
    # on a cluster the target's devices are on the worker nodes, which check it; this machine may have none
    platform = get_platform(args.target, require_available=cluster is None)
    size_class = args.size_class or size_class_for(platform.device_type)
    agent = choose_agent(args.agent, args.base_url, args.api_key, args.model)
    if agent == "llm" and not (args.model or _configured_model(args)):
        raise UsageError("the llm agent needs a model: pass --model or set KFORGE_MODEL")
    cfg = BenchConfig(suite=args.suite, level=args.level, target=args.target, out_dir=Path(args.out), agent=agent,
                      model=args.model, analysis_model=args.analysis_model, base_url=args.base_url,
                      api_key=args.api_key, db_path=args.db, max_functional_iters=args.max_functional_iters,
                      max_optimization_iters=args.max_optimization_iters, best_of_k=args.best_of,
                      size_class=size_class,
                      tolerance=args.tolerance, devices=args.devices, cluster=cluster,
                      cpus_per_task=args.cpus_per_task,
                      eval_baselines=not args.no_baselines, min_custom_share=args.min_custom_share,
                      time_limit_s=args.time_limit, problem_time_limit_s=args.problem_time_limit)
    summary = run_bench(cfg)
    if args.json:
        print_json(summary)
    else:
        print(f"{counts_text(summary)}; "
              f"fast_1 vs eager {_pct(summary['fast_p_vs_eager']['1'])}, vs torch.compile "
              f"{_pct(summary['fast_p_vs_compiled']['1'])}; geomean vs eager (failures as 1.0) "
              f"{_x(summary['geomean_speedup_vs_eager_failures_as_1'])}, vs the better of eager and "
              f"torch.compile (correct only) {_x(summary['geomean_speedup_vs_best_baseline_correct_only'])}")
        for label, parts in (("level", summary["per_level"]), ("kind", summary.get("per_kind", {}))):
            for name, s in parts.items():
                print(f"  {label} {name}: {counts_text(s)}; fast_1 vs eager {_pct(s['fast_1_vs_eager'])}")
        if summary.get("partial"):
            print(partial_text(summary))
        if summary.get("mixed_devices"):
            print(f"warning: {mixed_devices_note(summary['mixed_devices'])}")
        print(f"report: {Path(args.out) / 'report.html'}")
    return 0


def _configured_model(args) -> str | None:
    from ..llm import resolve_config

    return resolve_config(base_url=args.base_url, api_key=args.api_key, model=args.model).model


def _pct(v) -> str:
    return "—" if v is None else f"{100 * v:.0f}%"


def _x(v) -> str:
    return "—" if v is None else f"{v:.2f}x"
