"""Where a GPU timing's noise comes from: the evaluator's own CUDA timer (`DeviceClockTimer`) around the candidate,
eager and torch.compile'd reference of a problem, in fresh processes, each call either back to back or right after
the process was woken from a blocking read 30 ms later (as the candidate's process and the torch.compile baseline's
are at every timed request), with the timer's parts per call: the device's time between its events, the tail timed
on the host after the end event (side-stream work; otherwise the host's own jitter), the host clock around the
call, and what the timer reported.

    python bench/timer_parts.py [--problem P.py --candidate C.py] [--processes 3] [--trials 60] [--gap-ms 30]

Prints, per process, model and state: the median and 10th-90th percentiles of each part; then the spread of each
model's reported median across processes. Needs a CUDA GPU (the timer's lead-in and stream barrier are CUDA's).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PARTS = ("reported", "device_ms", "tail_ms", "host_ms")
STATES = ("busy", "woken")


def _child(problem: str, candidate: str, trials: int, port: int) -> None:
    import torch

    from bare_pair import load_pair
    from kforge_core.platform import get_platform

    platform = get_platform("cuda", require_available=True)
    platform.prepare_child()
    timer = platform.make_timer()
    prob, ref, new = load_pair(problem, candidate, "parts")
    device = platform.device()
    ref, new = ref.to(device), new.to(device)
    compiled = torch.compile(ref)
    models = {"candidate": new, "eager": ref, "compiled": compiled}
    sock = socket.create_connection(("127.0.0.1", port))
    rows: dict[str, dict[str, list[dict]]] = {m: {s: [] for s in STATES} for m in models}
    with torch.no_grad():
        for trial in range(trials + 3):
            torch.manual_seed(trial)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in prob.get_inputs()]
            order = list(models.items())
            order = order[trial % 3:] + order[:trial % 3]
            for state in STATES if trial % 2 else STATES[::-1]:
                for name, model in order:
                    if state == "woken":
                        sock.sendall(b"w")
                        sock.recv(1)  # the parent answers --gap-ms later
                    platform.flush_cache()
                    ms = timer.time_ms(lambda: model(*inputs))
                    if trial >= 3:
                        rows[name][state].append({"reported": ms, **getattr(timer, "last", {})})
    sock.sendall(b"d")
    print(json.dumps({"lead_in_us": getattr(timer, "lead_in_us", None), "rows": rows}))


def _waker(server: socket.socket, gap_s: float) -> None:
    conn, _ = server.accept()
    with conn:
        while True:
            b = conn.recv(1)
            if not b or b == b"d":
                return
            time.sleep(gap_s)
            conn.sendall(b"g")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default=str(ROOT / "platforms" / "examples" / "cuda" / "problem.py"))
    ap.add_argument("--candidate", default=str(ROOT / "platforms" / "examples" / "cuda" / "candidate.py"))
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--gap-ms", type=float, default=30.0)
    args = ap.parse_args()
    from kforge_core.eval.child_setup import timing_environment
    import os

    medians: dict[tuple[str, str], list[float]] = {}
    for p in range(args.processes):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        waker = threading.Thread(target=_waker, args=(server, args.gap_ms / 1000), daemon=True)
        waker.start()
        out = subprocess.run([sys.executable, __file__, "--child", args.problem, args.candidate, str(args.trials),
                              str(server.getsockname()[1])], env={**os.environ, **timing_environment()},
                             capture_output=True, text=True)
        server.close()
        if out.returncode != 0:
            print(out.stderr[-3000:])
            return 1
        data = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"\nprocess {p + 1}: lead-in {data['lead_in_us']:.0f} us")
        print("| model | state | " + " | ".join(f"{k} median (p10-p90)" for k in PARTS) + " | clean | lead-in us |")
        for model, by_state in data["rows"].items():
            for state, calls in by_state.items():
                cells = []
                for k in PARTS:
                    vals = [c[k] for c in calls if k in c]
                    cells.append(f"{statistics.median(vals):.4f} ({_pct(vals, 0.1):.4f}-{_pct(vals, 0.9):.4f})"
                                 if vals else "-")
                medians.setdefault((model, state), []).append(statistics.median(c["reported"] for c in calls))
                clean = sum(bool(c.get("clean")) for c in calls) / len(calls)
                lead = 1000 * calls[-1].get("lead_in_ms", 0)
                print(f"| {model} | {state} | " + " | ".join(cells) + f" | {clean:.0%} | {lead:.0f} |")
    print("\nreported medians across processes, (max - min) / median:")
    for (model, state), vals in medians.items():
        print(f"  {model:9s} {state:5s} {' '.join(f'{v:.4f}' for v in vals)}  spread "
              f"{(max(vals) - min(vals)) / statistics.median(vals):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
