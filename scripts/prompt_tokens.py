"""Prompt sizes of the generation agent on a gallery problem, counted with KForge's own estimator
(`kforge_core.llm.tokens.estimate_prompt_tokens`, ~4 characters per token), for three prompts a run sends:

    first     the first functional prompt
    retry     a functional retry after a compile error (a 300-line compiler log)
    optimize  an optimization prompt (best program, profile, roofline, 3 recommendations, a failed last attempt)
    heavy     a retry with a 60 KB compiler log and a 40 KB reference program, fitted to --window tokens of context

    python scripts/prompt_tokens.py [--problem level2/01_linear_bias_gelu] [--target cpu] [--size-class cpu]
                                    [--window 8192]

The requests are built by the loop itself (`Synthesis._request`), so the numbers follow whatever the loop puts in a
prompt. Needs no endpoint and evaluates nothing.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kforge_core import gallery  # noqa: E402
from kforge_core.agents.base import Recommendation  # noqa: E402
from kforge_core.agents.prompts import generation_messages  # noqa: E402
try:
    from kforge_core.llm.context import prompt_budget  # noqa: E402
except ImportError:  # a KForge from before context budgets: its prompts are not fitted to anything
    def prompt_budget(window: int, max_tokens: int | None) -> int:  # noqa: ARG001
        return 0
from kforge_core.llm.tokens import estimate_prompt_tokens  # noqa: E402
from kforge_core.loop.config import RunConfig  # noqa: E402
from kforge_core.loop.engine import Synthesis  # noqa: E402
from kforge_core.loop.feedback import feedback_for, optimization_feedback  # noqa: E402
from kforge_core.loop.types import Attempt  # noqa: E402
from kforge_core.eval.verdict import Timing, Verdict  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures_loop"


class _NoAgent:
    label = "none"


def _prompts(problem: str, target: str, size_class: str | None, window: int) -> dict[str, list[dict]]:
    gp = next(p for p in gallery.list_problems() if p.name == problem)
    config = RunConfig(problem_source=gp.path.read_text(), problem_name=gp.path.stem, target=target,
                       agent="builtin", size_class=size_class, max_optimization_iters=3)
    heavy_config = RunConfig(problem_source=gp.path.read_text(), problem_name=gp.path.stem, target=target,
                             agent="builtin", size_class=size_class, reference_target="cuda",
                             reference_program="# the CUDA program\n" + "x = 1  # a long reference line\n" * 1300)
    loop = Synthesis(config, _NoAgent(), _NoAgent())
    program = loop.spec.example_candidate  # a program in the target's format, of a realistic length
    log = "\n".join(f"candidate line {9 + i}: error: 'acc' was not declared in this scope" for i in range(300))
    failed = Attempt(0, "functional", "compile_error", "the kernel did not compile", program,
                     Verdict("compile_error", "the kernel did not compile", target, compile_log=log))
    profile = {"tool": "torch.profiler", "per_forward_ms": 12.5, "custom_share": 0.62, "launches_per_forward": 3,
               "kernels": [{"name": "aten::mm", "ms_per_forward": 4.1, "share": 0.33, "calls_per_forward": 1},
                           {"name": "gelu_bias", "custom": True, "ms_per_forward": 7.7, "share": 0.62,
                            "calls_per_forward": 1}]}
    roofline = {"bytes": 12e6, "flops": 2.1e9, "bandwidth_gbs": 20.0, "fp32_tflops": 0.3, "floor_ms": 7.0,
                "bound": "compute", "pct_of_roofline": 56.0}
    best = Attempt(1, "functional", "correct", "ok", program,
                   Verdict("correct", "ok", target, candidate=Timing(12.5, 12.5, 12.6, 10),
                           eager=Timing(14.0, 14.0, 14.1, 10), profile=profile, roofline=roofline))
    recs = [Recommendation(f"Change {n}", "tile the loop over 64 columns and keep the row in registers " * 2,
                           "the kernel is 62% of the time at 56% of the roofline", "~1.3x") for n in range(3)]
    last = Attempt(2, "optimization", "incorrect", "values differ (max abs error 0.3)", program, None, recs[:1])
    heavy_log = "\n".join(f"candidate line {9 + i}: error: 'acc' was not declared in this scope; "
                           "note: suggested alternative 'accumulate'" for i in range(600))
    heavy = Attempt(0, "functional", "compile_error", "the kernel did not compile", program,
                    Verdict("compile_error", "the kernel did not compile", target, compile_log=heavy_log))
    heavy_loop = Synthesis(heavy_config, _NoAgent(), _NoAgent())
    fits = "budget_tokens" in inspect.signature(generation_messages).parameters  # older KForge: no budget
    budget = prompt_budget(window, None)
    return {
        "heavy": generation_messages(heavy_loop._request("functional", 1, heavy, feedback_for(heavy)),
                                     *((budget,) if fits else ())),
        "first": generation_messages(loop._request("functional", 0, None, None)),
        "retry": generation_messages(loop._request("functional", 1, failed, feedback_for(failed))),
        "optimize": generation_messages(loop._request("optimization", 3, best,
                                                      optimization_feedback(best, last, recs))),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="level2/01_linear_bias_gelu")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--size-class", default="cpu")
    ap.add_argument("--window", type=int, default=8192, help="context window the heavy prompt is fitted to")
    args = ap.parse_args()
    prompts = _prompts(args.problem, args.target, args.size_class, args.window)
    for name in ("first", "retry", "optimize", "heavy"):
        print(f"{name:9s} {estimate_prompt_tokens(prompts[name]):6d} tokens (estimated, ~4 chars/token)")
    print(f"(heavy: fitted to {prompt_budget(args.window, None)} estimated tokens, the budget of a "
          f"{args.window}-token window)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
