"""Start of a run to its first verdict, with the evaluator prepared as the run begins (the fork server, its first
children and the run's torch.compile baseline started beside the model's first reply: `evaluator.prepare`) and
without (`KFORGE_PREPARE=0`: started by the first evaluation, after the reply), side by side in one run.

    python bench/first_verdict.py [--target cpu] [--latency 10] [--runs 3] [--broken]

The model is the project's fake OpenAI-protocol server on 127.0.0.1 (no endpoint is reachable from here), answering
the target's own example candidate after `--latency` seconds, as a hosted model takes seconds to write a program.
`--broken`: its answer is that candidate with a C++ syntax error (a first program that does not compile, as models
often write): the first verdict is a compile_error, which needs no torch.compile baseline.
Every run is a fresh process (a new CLI run or app worker: no fork server, no baseline yet), the two settings
alternate, and the table prints median/min/max seconds from the run's start to its first verdict and to its end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def broken(source: str) -> str:
    """The example candidate with one syntax error in its kernel: the first `;` that ends a line of its kernel source
    is cut (the CPU and CUDA examples both keep their kernel in an r\"\"\" string)."""
    kernel_start = source.index('r"""')
    cut = source.index(";\n", kernel_start)
    return source[:cut] + source[cut + 1:]


def one_run(target: str, latency: float, broken_first: bool = False) -> dict:
    from kforge_core.agents.factory import build_agents
    from kforge_core.loop import RunConfig, Synthesis
    from kforge_core.platform import get_platform
    from tests.fakes.openai_replies import Reply
    from tests.fakes.openai_server import FakeOpenAIServer

    example = get_platform(target, require_available=True).example()
    source = Path(example.candidate).read_text()
    program = f"Here it is.\n```python\n{broken(source) if broken_first else source}```\n"
    with FakeOpenAIServer(models=("gen-model",)) as server:
        server.enqueue_for("gen-model", Reply(text=program, delay_s=latency))
        cfg = RunConfig(problem_source=Path(example.problem).read_text(), problem_name="example", target=target,
                        model="gen-model", base_url=server.base_url, api_key="sk-bench", eval_baselines=True,
                        max_functional_iters=1, max_optimization_iters=0)
        start = time.perf_counter()
        generation, analysis = build_agents(cfg)
        first = status = None
        for event in Synthesis(cfg, generation, analysis).events():
            if event.kind == "iteration_finished" and first is None:
                first, status = time.perf_counter() - start, event.status
        return {"first_verdict_s": first, "end_s": time.perf_counter() - start, "status": status}


def main() -> int:
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(one_run(sys.argv[2], float(sys.argv[3]), sys.argv[4:5] == ["broken"])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--latency", type=float, default=10.0, help="seconds the model takes to reply (default 10)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--broken", action="store_true",
                    help="the model's first answer is a candidate that does not compile (a C++ syntax error)")
    args = ap.parse_args()
    results: dict[str, list[dict]] = {"prepared": [], "not prepared": []}
    print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, target {args.target}, model latency "
          f"{args.latency:g} s, {args.runs} runs each, first program "
          f"{'broken (does not compile)' if args.broken else 'the example'}, load {os.getloadavg()[0]:.1f}",
          flush=True)
    for i in range(args.runs):
        for name in (("prepared", "not prepared") if i % 2 == 0 else ("not prepared", "prepared")):
            env = {**os.environ, "KFORGE_PREPARE": "1" if name == "prepared" else "0"}
            out = subprocess.run([sys.executable, __file__, "--one", args.target, str(args.latency),
                                  *(["broken"] if args.broken else [])], env=env,
                                 capture_output=True, text=True, cwd=ROOT)
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[name].append(r)
            print(f"  run {i + 1} {name:<12} first verdict {r['first_verdict_s']:.1f} s ({r['status']}), "
                  f"end {r['end_s']:.1f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    print("\n| setting | first verdict s: median (min-max) | run end s: median (min-max) |\n|---|---|---|")
    for name, rs in results.items():
        first = [r["first_verdict_s"] for r in rs]
        end = [r["end_s"] for r in rs]
        print(f"| {name} | {statistics.median(first):.1f} ({min(first):.1f}-{max(first):.1f}) | "
              f"{statistics.median(end):.1f} ({min(end):.1f}-{max(end):.1f}) |")
    gain = statistics.median(r["first_verdict_s"] for r in results["not prepared"]) - \
        statistics.median(r["first_verdict_s"] for r in results["prepared"])
    print(f"\nprepared as the run begins: the first verdict {gain:.1f} s sooner (median)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
