"""Where a KForge command's own process spends its time, thread by thread: runs `python -m kforge_core ARGS` in this
process while a sampler thread reads every thread's stack every few milliseconds, then prints, per thread, the
innermost KForge frames (kforge_core/, platforms/) the samples fell in and the innermost frame of all.

    python bench/sample_stacks.py [--every-ms 5] [--top 20] -- bench --suite assets/problems --target cuda ...

Written for issue 28: on a 4-GPU host a bench's "synthesis" (from a run's start to its first evaluation stage) took
2.4 s a problem where the built-in's trace and writing take 0.25 s on the CPU box. Only this process is sampled:
evaluation children and fork servers are other processes (their stages are in the run store).
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OURS = (str(ROOT / "kforge_core"), str(ROOT / "platforms"))
IDLE = {"wait", "_wait_for_tstate_lock", "select", "poll", "recv", "accept", "sleep", "readline", "read", "get",
        "acquire", "_worker", "recv_into", "epoll"}


def where(frame) -> tuple[str, str]:
    """(innermost KForge frame, innermost frame) of one stack, as file:line function."""
    inner = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}"
    ours = ""
    f = frame
    while f is not None:
        if f.f_code.co_filename.startswith(OURS):
            ours = f"{Path(f.f_code.co_filename).relative_to(ROOT)}:{f.f_lineno} {f.f_code.co_name}"
            break
        f = f.f_back
    return ours or "(no KForge frame)", inner


class Sampler(threading.Thread):
    def __init__(self, every_s: float):
        super().__init__(daemon=True, name="stack-sampler")
        self.every_s, self.stop = every_s, threading.Event()
        self.ours: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.inner: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.samples = 0

    def run(self) -> None:
        me = threading.get_ident()
        while not self.stop.wait(self.every_s):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = names.get(ident, f"thread {ident}")
                ours, inner = where(frame)
                self.ours[name][ours] += 1
                self.inner[name][inner] += 1
            self.samples += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every-ms", type=float, default=5.0)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--idle", action="store_true", help="also list frames that only wait (sleep, select, lock)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the arguments of python -m kforge_core")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    from kforge_core.cli import main as cli_main

    sampler = Sampler(a.every_ms / 1000)
    start = time.perf_counter()
    sampler.start()
    try:
        rc = cli_main(args)
    finally:
        sampler.stop.set()
        sampler.join()
    wall = time.perf_counter() - start
    per = wall / max(1, sampler.samples)
    print(f"\n{sampler.samples} samples over {wall:.1f} s ({per * 1000:.1f} ms each); seconds are samples x that")
    from kforge_core.eval import forkserver

    # a fork server that would not start makes every child of its kind a spawn (seconds each), silently
    print(f"fork servers running: {forkserver.running()}; not used: {forkserver.failures() or 'none'}")
    for name in sorted(sampler.ours, key=lambda n: -sum(sampler.ours[n].values())):
        busy = {k: v for k, v in sampler.inner[name].items() if a.idle or k.split(" ")[-1] not in IDLE}
        if not busy:
            continue
        print(f"\n== thread {name}: busy {sum(busy.values()) * per:.1f} s of {sum(sampler.inner[name].values()) * per:.1f} s")
        print("   innermost KForge frame:")
        for k, v in sampler.ours[name].most_common(a.top):
            print(f"   {v * per:7.2f} s  {k}")
        print("   innermost frame (waiting frames left out unless --idle):")
        for k, v in sorted(busy.items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"   {v * per:7.2f} s  {k}")
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
