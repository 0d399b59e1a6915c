"""The signal-disposition snapshot ignores glibc's own signals, so an honest CPU candidate stays `correct` when its
OpenMP pool is the process's first thread (OMP_NUM_THREADS=1, as Ray sets for one-CPU tasks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_native_state_leaves_out_glibc_signals_and_keeps_the_rest():
    code = ("import signal, threading\nfrom kforge_core.eval.harness.process_state import native_state\n"
            "a = native_state()\nthreading.Thread(target=lambda: None).start()\nb = native_state()\n"
            "signal.signal(signal.SIGALRM, lambda *x: None)\nc = native_state()\n"
            "k = 'signal dispositions (SigCgt)'\nprint(a[k] == b[k], b[k] != c[k])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.stdout.split() == ["True", "True"], out.stdout + out.stderr


def test_honest_cpu_candidate_is_correct_with_one_openmp_thread(tmp_path):
    example = ROOT / "platforms" / "examples" / "cpu"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "KFORGE_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-m", "kforge_core", "evaluate", "--problem", str(example / "problem.py"),
                          "--candidate", str(example / "candidate.py"), "--target", "cpu", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    verdict = json.loads(out.stdout)
    assert verdict["status"] == "correct", verdict["reason"]


def test_load_inline_include_check_leaves_out_the_toolchains_headers(tmp_path):
    """nvcc's dependency list names every header it read; torch's and CUDA's are the toolchain's, a header
    elsewhere (or the candidate's own directory) stays for the include check to judge."""
    from kforge_core.eval.harness.inline_cache import _outside

    trusted = tmp_path / "torch" / "include"
    (trusted / "ATen").mkdir(parents=True)
    (tmp_path / "build").mkdir()
    entries = [str(trusted / "ATen" / "ATen.h"), "main.cpp", "/etc/passwd", str(tmp_path / "torch" / "includex.h")]
    kept = _outside(entries, tmp_path / "build", (str(trusted),))
    assert kept == ["main.cpp", "/etc/passwd", str(tmp_path / "torch" / "includex.h")]
