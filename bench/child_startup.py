"""Start-up cost of one evaluation child, by how it is started: spawned (`KFORGE_EVAL_SPAWN=1`: a fresh Python,
torch import, isolation, device context), forked on demand from the fork server (`KFORGE_EVAL_POOL=0`: isolation and
device context after the fork), pre-started (`kforge_core.eval.warm_pool`: all of that done before the request).

Each run is `sandbox.run_child` of an evaluation request whose problem fails at import, so the child starts, sets up
its platform (`prepare_child`: the CUDA context on GPU targets) and answers at once: the wall time is the child's
start, set-up and end, with nothing of the checks. Variants interleave (round-robin) so the machine's load hits them
alike; before each run the pool has finished starting its replacements, as it would have between two evaluations of
a run.

    python bench/child_startup.py --target cpu [--runs 8] [--variants spawn,fork,pool]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kforge_core.eval import sandbox, warm_pool  # noqa: E402
from kforge_core.eval.memory_use import default_memory_limit_mb  # noqa: E402
from kforge_core.platform import get_platform  # noqa: E402

VARIANTS = {  # name: (label, environment)
    "spawn": ("spawned (KFORGE_EVAL_SPAWN=1)", {"KFORGE_EVAL_SPAWN": "1", "KFORGE_EVAL_POOL": "0"}),
    "fork": ("forked on demand (KFORGE_EVAL_POOL=0)", {"KFORGE_EVAL_SPAWN": "0", "KFORGE_EVAL_POOL": "0"}),
    "pool": ("pre-started (the default)", {"KFORGE_EVAL_SPAWN": "0", "KFORGE_EVAL_POOL": "1"}),
}
FAILING_PROBLEM = "raise SystemExit('the start-up benchmark stops here')\n"


def _start_once(platform) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = sandbox.run_child({"mode": "evaluate", "target": platform.name}, {"problem.py": FAILING_PROBLEM},
                            timeout_s=120, memory_limit_mb=default_memory_limit_mb(),
                            limit_address_space=platform.limit_address_space,
                            fork_server_safe=platform.fork_server_safe)
    wall = time.perf_counter() - t0
    reason = (out.result or {}).get("reason", f"no result (exit {out.returncode}): {out.log[-300:]}")
    return wall, reason


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--variants", default="spawn,fork,pool")
    args = ap.parse_args()
    keys = [k.strip() for k in args.variants.split(",") if k.strip()]
    platform = get_platform(args.target, require_available=True)
    print(f"device: {platform.device_name()}; load average {os.getloadavg()[0]:.1f}", flush=True)
    walls: dict[str, list[float]] = {k: [] for k in keys}
    for round_ in range(args.runs + 1):  # round 0 warms each variant (server start, pool fill): not counted
        for key in keys:
            os.environ.update(VARIANTS[key][1])
            handed = warm_pool.STATS["handed_off"]
            wall, reason = _start_once(platform)
            if "start-up benchmark" not in reason:
                print(f"unexpected answer from the {key} child: {reason}", file=sys.stderr)
                return 1
            if round_:
                walls[key].append(wall)
                if key == "pool" and warm_pool.STATS["handed_off"] == handed:
                    print("  (pool: no pre-started child was waiting; forked on demand)", flush=True)
            warm_pool.settle()
    print(f"\nOne evaluation child's start, set-up and end, target {args.target}, {args.runs} runs each "
          f"(load average now {os.getloadavg()[0]:.1f}):")
    print("| child | median s | min s | max s |\n|---|---|---|---|")
    for key in keys:
        w = walls[key]
        print(f"| {VARIANTS[key][0]} | {statistics.median(w):.3f} | {min(w):.3f} | {max(w):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
