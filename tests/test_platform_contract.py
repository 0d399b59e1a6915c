"""The platform contract, checked against every registered target; and proof that a new target needs one module
plus its example and nothing else (a toy platform registered from outside the repository)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kforge_core.platform import Availability, Platform, all_platforms
from kforge_core.problem import load_problem
from kforge_core.eval.rules import check_candidate

REPO = Path(__file__).resolve().parents[1]
PLATFORMS = all_platforms()


def test_builtin_targets_are_registered():
    assert {"cpu", "metal"} <= set(PLATFORMS)


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_declared_attributes_and_availability(name):
    platform = PLATFORMS[name]
    assert isinstance(platform, Platform) and platform.name == name
    assert platform.title and platform.formats and platform.kernel_language and platform.module_name
    avail = platform.availability()
    assert isinstance(avail, Availability) and avail.reason, "an unavailable target must say why"


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_single_shot_example_is_a_valid_pair(name):
    platform = PLATFORMS[name]
    example = platform.example()
    assert example.problem.is_file() and example.candidate.is_file()
    load_problem(path=example.problem)
    violations = check_candidate(example.candidate.read_text(), platform.module_name, platform.candidate_api,
                                 allow_inline_asm=platform.allows_inline_asm)
    assert violations == [], violations


def test_discovering_platforms_does_not_import_torch():
    """The app and the CLI list targets constantly; importing torch there costs seconds (regression: CUDA/Metal
    modules imported torch at module level)."""
    code = "import sys; from kforge_core.platform import all_platforms; all_platforms(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


TOY_MODULE = '''
"""A third-party target: a CPU variant named 'toy', registered through KFORGE_PLATFORMS."""
from pathlib import Path

from kforge_core.platform import Example, Platform
from platforms.cpu import PLATFORM as CPU, compile_cpp


def compile_toy(source):
    return compile_cpp(source)


class ToyPlatform(Platform):
    name = "toy"
    title = "Toy (C++ via the CPU helpers)"
    kernel_language = "cpp"
    formats = ("ctypes",)
    device_type = "cpu"
    limit_address_space = True
    candidate_api = ("compile_toy",)
    module_name = "toyplat"

    def availability(self):
        return CPU.availability()

    def example(self):
        here = Path(__file__).parent / "toy_example"
        return Example(problem=here / "problem.py", candidate=here / "candidate.py")


PLATFORM = ToyPlatform()
'''


def test_a_new_target_is_one_module_plus_its_example(tmp_path):
    (tmp_path / "toyplat.py").write_text(TOY_MODULE)
    example = tmp_path / "toy_example"
    example.mkdir()
    cpu_example = REPO / "platforms" / "examples" / "cpu"
    (example / "problem.py").write_text((cpu_example / "problem.py").read_text().replace("batch_size = 512",
                                                                                         "batch_size = 16"))
    (example / "candidate.py").write_text((cpu_example / "candidate.py").read_text()
                                          .replace("from platforms.cpu import compile_cpp",
                                                   "from toyplat import compile_toy as compile_cpp"))
    env = {**os.environ, "KFORGE_PLATFORMS": "toyplat",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    listed = subprocess.run([sys.executable, "-m", "kforge_core", "platforms", "--json"], capture_output=True,
                            text=True, cwd=REPO, env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert any(p["name"] == "toy" and p["available"] for p in json.loads(listed.stdout))
    done = subprocess.run([sys.executable, "-m", "kforge_core", "evaluate", "--problem", str(example / "problem.py"),
                           "--candidate", str(example / "candidate.py"), "--target", "toy", "--json", "--no-timing"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["status"] == "correct", verdict["reason"]
    assert verdict["target"] == "toy"


def test_discovery_from_many_threads_at_once_sees_every_platform():
    """The first discovery may be asked for by several threads (bench workers, the app's form): none may see a
    half-filled registry (it once answered 'unknown target; known targets: none')."""
    import subprocess
    import sys

    code = ("import threading\nfrom kforge_core.platform import get_platform\nerrors = []\n"
            "def ask():\n    try:\n        get_platform('cpu')\n    except Exception as e:\n        errors.append(e)\n"
            "ts = [threading.Thread(target=ask) for _ in range(16)]\n[t.start() for t in ts]\n[t.join() for t in ts]\n"
            "print(len(errors))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parent.parent))
    assert out.stdout.strip() == "0", out.stdout + out.stderr
