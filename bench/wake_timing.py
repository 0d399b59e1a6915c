"""Does a timed call in a process that was just woken from a blocking read take longer than the same call timed in a
process that never slept? (issue 22's GPU fidelity: the candidate and the torch.compile baseline are timed in
processes that wait for each request; eager, timed inside the judge, never waits, and its trials are the steady ones.)

One child process, CUDA initialised, times the same call (an elementwise op over --mib MiB in and out, about a
candidate's 0.2 ms kernel on an H100) as the evaluation's timers do (device sync, host clock, call, device sync, host
clock, after a cache flush), in several states, interleaved trial by trial:

  hot        back to back in a loop, as eager is timed in the judge
  woken      after blocking on a socket until the parent writes to it (--gap-ms later), as a candidate's `time` request
  woken+spin the same, then the CPU kept busy for --spin-us before the clock starts
  woken+warm the same, then one small torch op on the device and a sync before the clock starts

Prints each state's median / min / p90 and the median's excess over hot's. Needs a CUDA GPU.

    python bench/wake_timing.py [--trials 200] [--mib 256] [--gap-ms 3] [--spin-us 200]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

STATES = ("hot", "woken", "woken+spin", "woken+warm")


def _child(sock: socket.socket, args) -> None:
    import torch

    dev = torch.device(args.device)
    n = args.mib * (1 << 20) // 4
    x, y = torch.randn(n, device=dev), torch.empty(n, device=dev)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    tiny = torch.zeros(1, device=dev)
    clock = time.perf_counter_ns
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def timed() -> float:
        flush.zero_()
        sync()
        t0 = clock()
        torch.add(x, 1.0, out=y)
        sync()
        return (clock() - t0) / 1e6

    for _ in range(20):
        timed()
    out: dict[str, list[float]] = {s: [] for s in STATES}
    for trial in range(args.trials):
        for state in STATES[trial % len(STATES):] + STATES[:trial % len(STATES)]:
            if state == "hot":
                out[state].append(timed())
                continue
            sock.sendall(b"w")  # ask to be woken
            sock.recv(1)  # blocks until the parent writes, --gap-ms later
            if state == "woken+spin":
                end = clock() + args.spin_us * 1000
                while clock() < end:
                    pass
            elif state == "woken+warm":
                tiny.add_(1.0)
                sync()
            out[state].append(timed())
    sock.sendall(b"d")
    sock.sendall(repr(out).encode() + b"\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--gap-ms", type=float, default=3.0)
    ap.add_argument("--spin-us", type=float, default=200.0)
    ap.add_argument("--device", default="cuda", help="cpu: a trial of the script itself on a machine without a GPU")
    args = ap.parse_args()
    parent, child = socket.socketpair()
    pid = os.fork()  # before the parent touches CUDA: the child initialises it
    if pid == 0:
        parent.close()
        try:
            _child(child, args)
        finally:
            os._exit(0)
    child.close()
    buf = b""
    while True:
        b = parent.recv(1)
        if b == b"w":
            time.sleep(args.gap_ms / 1000)
            parent.sendall(b"g")
        elif b == b"d":
            break
        elif not b:
            print("the child died", file=sys.stderr)
            return 1
    while not buf.endswith(b"\n"):
        more = parent.recv(1 << 20)
        if not more:
            break
        buf += more
    os.waitpid(pid, 0)
    import ast

    out = ast.literal_eval(buf.decode())
    hot = statistics.median(out["hot"])
    print(f"{args.mib} MiB elementwise, {args.trials} trials a state, woken {args.gap_ms} ms after asking, "
          f"spin {args.spin_us} us; load {os.getloadavg()[0]:.1f}")
    print("| state | median ms | min ms | p90 ms | median over hot's |")
    print("|---|---|---|---|---|")
    for s in STATES:
        v = sorted(out[s])
        med = statistics.median(v)
        print(f"| {s} | {med:.4f} | {v[0]:.4f} | {v[int(0.9 * (len(v) - 1))]:.4f} | {100 * (med / hot - 1):+.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
