"""bench/sample_stacks.py: the per-thread sampler that found the H200's spawned traces (issue 28) must attribute time
to the frames it was really spent in, and run a kforge_core command end to end."""

import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import sample_stacks  # noqa: E402


def _ours(src: str, name: str):
    """A function whose code object says it lives in kforge_core/ (the sampler's 'ours')."""
    scope: dict = {"time": time}
    exec(compile(src, str(ROOT / "kforge_core" / "sampled_here.py"), "exec"), scope)
    return scope[name]


def test_time_is_attributed_to_the_thread_and_frames_it_was_spent_in():
    spin = _ours("def spin(seconds):\n    end = time.monotonic() + seconds\n    while time.monotonic() < end:\n"
                 "        pass\n", "spin")

    def outside(seconds):  # not ours: the innermost frame, under spin's KForge frame
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    nap = _ours("def nap(seconds):\n    time.sleep(seconds)\n", "nap")
    sampler = sample_stacks.Sampler(0.002)
    sampler.start()
    busy = threading.Thread(target=spin, args=(0.4,), name="busy")
    idle = threading.Thread(target=nap, args=(0.4,), name="idle")
    busy.start(), idle.start()
    outside(0.6)  # longer than the threads: the main thread then barely waits in join
    busy.join(), idle.join()
    sampler.stop.set()
    sampler.join()
    # shares of the samples, not counts: on a loaded 2-core box the sampler wakes less often
    assert sampler.samples >= 5
    (top, n), *_ = sampler.ours["busy"].most_common()
    assert top.startswith("kforge_core/sampled_here.py:") and top.endswith(" spin")
    assert n >= 0.8 * sum(sampler.ours["busy"].values())
    assert sampler.ours["idle"].most_common(1)[0][0].endswith(" nap")
    # the main thread ran no KForge code: said so, and its innermost frame is the loop in this file
    assert sampler.ours["MainThread"].most_common(1)[0][0] == "(no KForge frame)"
    assert sampler.inner["MainThread"].most_common(1)[0][0].split(" ")[-1] == "outside"
    assert "stack-sampler" not in sampler.ours  # it never samples itself


def test_runs_a_kforge_command_and_reports_its_threads_and_fork_servers():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "sample_stacks.py"), "--top", "3", "--", "platforms"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert any(line.split()[:2] == ["cpu", "available"] for line in out.stdout.splitlines())  # the command's own output
    assert "== thread MainThread: busy" in out.stdout
    assert "fork servers running: []; not used: none" in out.stdout
