"""The problem gallery (assets/problems) and kforge_core.gallery.

Every problem is run once at its CPU size class: it must load, instantiate, run, give finite outputs, be
deterministic, not mutate its inputs, and depend on its inputs. Timings are deliberately not asserted.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from kforge_core import gallery
from kforge_core.gallery import (GALLERY_DIR, GalleryProblem, ProblemNotFound, get_problem, list_problems,
                                 load_module, size_overrides)

PROBLEMS = list_problems()
NAMES = [p.name for p in PROBLEMS]
MIN_PER_LEVEL = {1: 14, 2: 12, 3: 5}


# ------------------------------------------------------------------------------------------- the gallery

def test_gallery_dir_and_level_counts():
    assert GALLERY_DIR.is_dir(), GALLERY_DIR
    counts = {lvl: len(list_problems(lvl)) for lvl in MIN_PER_LEVEL}
    for lvl, minimum in MIN_PER_LEVEL.items():
        assert counts[lvl] >= minimum, f"level{lvl} has {counts[lvl]} problems, want >= {minimum}"
    assert len(PROBLEMS) >= 32
    assert sum(counts.values()) == len(PROBLEMS)


def test_names_are_unique_and_well_formed():
    assert len(set(NAMES)) == len(NAMES)
    for p in PROBLEMS:
        assert re.fullmatch(r"level[123]/\d\d_[a-z0-9_]+", p.name), p.name
        assert p.name == f"level{p.level}/{p.path.stem}"
        assert p.path.parent.name == f"level{p.level}"
    for lvl in MIN_PER_LEVEL:  # no two files share a number within a level
        numbers = [p.path.stem.split("_", 1)[0] for p in list_problems(lvl)]
        assert len(set(numbers)) == len(numbers), numbers


@pytest.mark.parametrize("name", NAMES)
def test_metadata(name):
    p = get_problem(name)
    assert p.description and "\n" not in p.description, "the module docstring's first line is the description"
    assert len(p.description) <= 160, "keep the description to one line"
    assert p.title.strip()
    cpu = size_overrides(p.path, "cpu")
    assert isinstance(cpu, dict) and cpu, "CPU_SIZES must be a non-empty literal dict"
    assert size_overrides(p.path, "gpu") == {}


def _nbytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(y) for y in x)
    return 0


@pytest.mark.parametrize("name", NAMES)
def test_gpu_size_is_consistent_and_large_enough(name):
    """The GPU defaults run shape-only on the meta device (nothing allocated) and, by a roofline lower bound
    (3 TB/s for the unavoidable input+output+weight traffic, 50 TFLOP/s for matmul/conv FLOPs), need >= 1 ms
    on an H100."""
    from torch.utils.flop_counter import FlopCounterMode

    module = load_module(get_problem(name).path, "gpu")
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            out = model(*inputs)
    assert _tensors(out) and all(t.numel() > 0 for t in _tensors(out))
    traffic = _nbytes(inputs) + _nbytes(out) + sum(_nbytes(t) for t in model.parameters())
    est_ms = max(counter.get_total_flops() / 50e12, traffic / 3e12) * 1e3
    assert est_ms >= 1.0, f"GPU size too small: roofline estimate {est_ms:.2f} ms"
    assert traffic < 16 * 2**30, "keep the GPU size's inputs+outputs under 16 GiB"


# ------------------------------------------------------------------------------ every problem, CPU sizes

@dataclass
class Run:
    problem: GalleryProblem
    module: object
    out_a: object
    out_a_again: object
    out_b: object
    inputs_mutated: bool


def _inputs(module, seed):
    torch.manual_seed(seed)
    return module.get_inputs()


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(y) for y in x)
    return x


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _tensors(y)]
    return []


@pytest.fixture(scope="module", params=NAMES)
def run(request):
    """One problem at CPU sizes: three forwards (seed A, seed A again, seed B). Module scope + params makes
    pytest group the tests by problem, so only one problem's tensors are alive at a time."""
    problem = get_problem(request.param)
    module = load_module(problem.path, "cpu")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    with torch.no_grad():
        inputs = _inputs(module, 1)
        before = _clone(inputs)
        out_a = model(*inputs)
        mutated = not _same(inputs, before)
        del before
        out_a_again = model(*inputs)
        del inputs
        out_b = model(*_inputs(module, 2))
    return Run(problem, module, out_a, out_a_again, out_b, mutated)


def test_cpu_sizes_applied(run):
    for key, value in run.module.CPU_SIZES.items():
        assert getattr(run.module, key) == value


def test_forward_runs_and_is_finite(run):
    tensors = _tensors(run.out_a)
    assert tensors, "forward must return a tensor (or a list/tuple of tensors)"
    for t in tensors:
        assert t.numel() > 0
        if t.is_floating_point():
            assert torch.isfinite(t).all(), "non-finite values in the output"


def test_forward_is_deterministic(run):
    assert _same(run.out_a, run.out_a_again), "same inputs twice gave different outputs"


def test_forward_does_not_mutate_inputs(run):
    assert not run.inputs_mutated, "forward modified its inputs in place"


def test_output_depends_on_inputs(run):
    for a, b in zip(_tensors(run.out_a), _tensors(run.out_b)):
        assert a.shape == b.shape
        changed = (a != b).float().mean().item()
        assert changed > 0.1, f"only {changed:.1%} of the output changed between two input seeds"
        if a.numel() > 1 and a.is_floating_point():
            assert a.float().std().item() > 0, "constant output"


# ------------------------------------------------------------------------------------------ gallery API

def test_list_problems_filters_by_level():
    assert [p.name for p in list_problems("level2")] == [p.name for p in list_problems(2)]
    assert all(p.level == 2 for p in list_problems(2))
    assert list_problems(9) == []
    assert NAMES == sorted(NAMES, key=lambda n: (int(n[5]), n))
    with pytest.raises(ValueError):
        list_problems("two")


def test_get_problem_accepts_variants():
    p = get_problem("level1/01_relu")
    assert p.level == 1 and p.path == GALLERY_DIR / "level1" / "01_relu.py" and p.title == "ReLU"
    assert p.description.startswith("ReLU")
    assert get_problem("level1/01_relu.py") == p
    assert get_problem("level1\\01_relu") == p


def test_get_problem_unknown_name_suggests_close_matches():
    with pytest.raises(KeyError) as exc:
        get_problem("level1/01_rleu")
    assert isinstance(exc.value, ProblemNotFound)
    assert "level1/01_relu" in exc.value.suggestions
    msg = str(exc.value)
    assert "level1/01_rleu" in msg and "did you mean" in msg and "level1/01_relu" in msg
    with pytest.raises(ProblemNotFound) as exc:
        get_problem("softmax")
    assert "level1/12_softmax" in exc.value.suggestions
    with pytest.raises(ProblemNotFound) as exc:
        get_problem("zzzzqqqq")
    assert exc.value.suggestions == [] and "list_problems" in str(exc.value)


def test_size_overrides_sources_agree():
    p = get_problem("level1/16_matmul_square")
    expected = {"N": 1024}
    assert size_overrides(p.path, "cpu") == expected
    assert size_overrides(str(p.path), "cpu") == expected
    assert size_overrides(p, "cpu") == expected
    assert size_overrides(p.name, "cpu") == expected
    module = load_module(p)
    assert size_overrides(module, "CPU") == expected
    assert size_overrides(vars(module), "cpu") == expected
    assert size_overrides(vars(module), "gpu") == {}
    with pytest.raises(ValueError):
        size_overrides(p.path, "tpu")


def test_load_module_fresh_and_sized():
    p = get_problem("level1/16_matmul_square")
    gpu = load_module(p.path)
    cpu = load_module(p.path, "cpu")
    assert gpu is not cpu and gpu.__name__ != cpu.__name__
    assert gpu.N == 8192 and cpu.N == 1024
    assert sys.modules[cpu.__name__] is cpu
    # get_inputs reads the globals at call time
    a, b = cpu.get_inputs()
    assert a.shape == (1024, 1024) and b.shape == (1024, 1024)
    cpu.N = 3
    assert load_module(p.path, "cpu").N == 1024  # a fresh module every time


def test_load_module_errors(tmp_path: Path):
    src = (
        '"""Tiny problem."""\nimport torch\nn = 8\n\nclass Model(torch.nn.Module):\n'
        "    def forward(self, x):\n        return x * 2\n\n"
        "def get_inputs():\n    return [torch.randn(n)]\n\ndef get_init_inputs():\n    return []\n"
    )
    no_sizes = tmp_path / "no_sizes.py"
    no_sizes.write_text(src)
    assert load_module(no_sizes).n == 8
    with pytest.raises(ValueError, match="CPU_SIZES"):
        load_module(no_sizes, "cpu")
    typo = tmp_path / "typo.py"
    typo.write_text(src + 'CPU_SIZES = {"m": 4}\n')
    with pytest.raises(ValueError, match="unknown globals"):
        load_module(typo, "cpu")
    ok = tmp_path / "ok.py"
    ok.write_text(src + 'CPU_SIZES = {"n": 4}\n')
    assert load_module(ok, "cpu").get_inputs()[0].shape == (4,)
    with pytest.raises(FileNotFoundError):
        load_module(tmp_path / "missing.py")


def test_gallery_is_independent_of_other_core_modules():
    import ast

    tree = ast.parse(Path(gallery.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("kforge_core"), ast.dump(node)
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("kforge_core") for a in node.names)
