"""The built-in synthesizer's generated programs equal the checked manifest (scripts/program_manifest.py).

A refactor leaves every program byte-identical; a kernel change regenerates the manifest in the same commit
(`python scripts/program_manifest.py --update`) and says why in the commit message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "program_manifest.py"


def test_manifest_covers_every_problem_target_and_schedule():
    programs = json.loads((ROOT / "tests" / "data" / "program_manifest.json").read_text())["programs"]
    problems = {k.split("|")[0] for k in programs}
    assert len(problems) == len(list((ROOT / "assets" / "problems").glob("level*/*.py")))
    for target, moves in (("cpu", 5), ("cuda", 6), ("triton", 6), ("metal", 6)):
        labels = {k.split("|")[2] for k in programs if k.split("|")[1] == target}
        assert len(labels) == moves + 2, (target, sorted(labels))  # plain, each move prefix, conservative


def test_generated_programs_match_the_manifest():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, (
        "generated programs differ from tests/data/program_manifest.json; if the change is intended, run "
        "`python scripts/program_manifest.py --update` and say why in the commit\n" + proc.stdout[-4000:]
        + proc.stderr[-2000:])
    assert proc.stdout.strip().splitlines()[-1].endswith(" 0 changed")


def test_check_reports_a_changed_program(tmp_path):
    """The check can fail: a manifest with one altered hash is reported by name with exit 1."""
    from importlib import util

    spec = util.spec_from_file_location("program_manifest", SCRIPT)
    mod = util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    old = {"level1/01_relu|cpu|plain": "a" * 64, "gone|cpu|plain": "b" * 64}
    new = {"level1/01_relu|cpu|plain": "c" * 64, "level1/02_gelu|cpu|plain": "d" * 64}
    assert mod.diff(old, new, None) == ["changed  level1/01_relu|cpu|plain", "new      level1/02_gelu|cpu|plain",
                                        "missing  gone|cpu|plain"]
