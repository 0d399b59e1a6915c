"""The memory a supervised evaluation is charged: pages shared between its processes (the judge's arena, mapped by
the judge and by the candidate's process) count once, not once per process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kforge_core.eval.memory_use import default_memory_limit_mb, session_memory_mb

SHARED_MB = 256
# A session leader maps a shared memfd, touches every page, then forks a child that maps the same pages.
SCRIPT = f"""
import mmap, os, sys, time
fd = os.memfd_create("arena")
os.ftruncate(fd, {SHARED_MB} << 20)
m = mmap.mmap(fd, {SHARED_MB} << 20)
for i in range(0, {SHARED_MB} << 20, 4096):
    m[i] = 1
if os.fork() == 0:
    s = sum(m[i] for i in range(0, {SHARED_MB} << 20, 4096))
    print("child", s, flush=True)
    time.sleep(60)
    os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not Path("/proc/self/smaps_rollup").exists(),
                    reason="Pss needs Linux's /proc/<pid>/smaps_rollup")
def test_shared_pages_are_charged_once():
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines = {proc.stdout.readline().split()[0] for _ in range(2)}
        assert lines == {"ready", "child"}
        time.sleep(0.2)
        out = subprocess.run(["ps", "-o", "rss=", "-s", str(proc.pid)], capture_output=True, text=True).stdout
        rss_total = sum(int(x) for x in out.split()) / 1024
        charged = session_memory_mb(proc.pid)
        assert rss_total > 2 * SHARED_MB  # each process resident in the whole arena
        assert SHARED_MB <= charged < 1.5 * SHARED_MB, (charged, rss_total)
        # under a limit the resident total already shows it is within: no Pss read; over it, Pss decides
        assert session_memory_mb(proc.pid, within_mb=rss_total + 1) > 2 * SHARED_MB
        assert SHARED_MB <= session_memory_mb(proc.pid, within_mb=1.5 * SHARED_MB) < 1.5 * SHARED_MB
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        proc.wait()


def test_evaluations_default_to_a_limit_the_host_can_hold():
    import os

    from kforge_core.eval.evaluator import EvalOptions

    total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 20)
    limit = EvalOptions().memory_limit_mb
    assert limit == default_memory_limit_mb() >= 16384
    if total_mb > 16384 / 0.6:  # a large host (the H100 machines have 128 GiB): most of it, never all of it
        assert 16384 < limit < total_mb
