"""The built-in compiler's seams, checked on one traced module without a GPU: the named plan rewrites
(`synth/plan/rewrites.py`), the CUDA kernel schedule that both a kernel's text and its launch read
(`synth/backends/cuda/schedule.py`), the C-family writer's per-language dialects (`synth/backends/cfamily.py`) and
the row-operator template table (`synth/lower/row_templates.py`). The generated programs themselves are pinned by
the program manifest (`test_program_manifest.py`)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import replace

import pytest

from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.backends import CppCtypesBackend, cpu
from kforge_core.synth.backends.cfamily import CPP, CUDA, METAL, math_wrappers
from kforge_core.synth.backends.cuda.launch import cuda_launch_lines
from kforge_core.synth.backends.cuda.schedule import kernel_schedule
from kforge_core.synth.backends.cuda.writer import CudaBackend, _cuda_signature, cuda_kernel
from kforge_core.synth.backends.metal import MetalBackend, metal_kernel
from kforge_core.synth.lower.graph import lower
from kforge_core.synth.lower.operators import ROW_OPS
from kforge_core.synth.lower.row_templates import ROW_TEMPLATES
from kforge_core.synth.plan import rewrites
from kforge_core.synth.plan.fusion import build_plan
from kforge_core.synth.schedule import Schedule

FULL = Schedule(fuse=True, parallel=True, vectorize=True, block=True, unroll=True, warp_reduce=True)

SOURCE = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x, y):
            return torch.nn.functional.layer_norm(x + y, (256,)) + torch.softmax(x, dim=-1)


    def get_inputs():
        return [torch.randn(8, 256), torch.randn(8, 256)]


    def get_init_inputs():
        return []
''')


@pytest.fixture(scope="module")
def plan():
    """One kernel per traced node (layer_norm and softmax in kernels of their own)."""
    desc = BuiltinGenerationAgent(size_class="cpu").trace(SOURCE, "cpu")
    return build_plan(lower(desc, fuse_cat=True, halves=("bfloat16", "float16")), fuse=False)


def _by_label(pp, word: str):
    return next(k for k in pp.kernels if word in k.label)


def test_rewrites_go_by_name_and_an_unknown_name_is_refused(plan):
    assert rewrites.apply(plan, ()) is plan
    with pytest.raises(ValueError, match=r"unknown plan rewrite 'fold_everything' \(known: group_norm_pipeline, "):
        rewrites.apply(plan, ("fold_everything",))
    # a GroupNorm pipeline needs a recorded GroupNorm: without one the plan is returned as it is
    assert rewrites.apply(plan, ("group_norm_pipeline",)) is plan


def test_variance_fold_marks_the_variance_pass_only_and_leaves_its_input_alone(plan):
    folded = rewrites.apply(plan, ("variance_fold",))
    ln, sm = _by_label(folded, "layer_norm"), _by_label(folded, "softmax")
    assert list(ln.variance_folds) == [2]  # pass 2 (the squared deviations) folds into pass 1 (the mean)
    mean, squares = ln.variance_folds[2]
    assert ln.nodes[[n.name for n in ln.nodes].index(mean)].red["op"] == "mean"
    assert squares != mean
    assert sm.variance_folds == {}  # max, then a sum of exps: nothing squared
    assert _by_label(plan, "layer_norm").variance_folds == {}  # a new plan; the one given is unchanged
    assert folded.units.count(ln) == 1  # the annotated kernel replaced the original among the units too


def test_only_the_cuda_writer_asks_for_rewrites():
    assert CudaBackend().rewrites(FULL) == ("group_norm_pipeline", "variance_fold")
    assert CudaBackend().rewrites(Schedule()) == ("variance_fold",)  # the pipeline needs vectors and block_shape
    assert MetalBackend().rewrites(FULL) == () and CppCtypesBackend().rewrites(FULL) == ()


def test_a_cuda_kernel_text_and_launch_both_follow_its_schedule(plan):
    """Changing the schedule value changes the kernel's bound and its launch's threads together: neither side
    works the numbers out again."""
    ln = _by_label(rewrites.apply(plan, ("variance_fold",)), "layer_norm")
    ks = kernel_schedule(ln, FULL)
    assert ks.shape == "block_rows" and ks.bounds == (ks.threads,) and ks.cached
    for threads in (ks.threads, 128):
        k2 = replace(ks, threads=threads, bounds=(threads,))
        text = cuda_kernel(ln, FULL, k2)
        launch = cuda_launch_lines(ln, dict(plan.lowered.names), _cuda_signature, k2)
        assert f"__launch_bounds__({threads}) " in text
        assert any(f"threads = min({threads}, " in line for line in launch.setup)
    elementwise = next(k for k in plan.kernels if not k.npasses)
    ew = kernel_schedule(elementwise, FULL)
    assert (ew.shape, ew.threads, ew.bounds, ew.batch) == ("elementwise", 64, (64, 10), 4)
    assert f"const long long CH = {ew.chunk};" in cuda_kernel(elementwise, FULL, ew)


def test_each_language_spells_the_same_kernel_in_its_own_dialect(plan):
    """A thread per row in all three: the same statements, with each language's pointers, integers and sums."""
    ln, sched = _by_label(plan, "layer_norm"), Schedule()
    texts = {"c++": cpu.kernel(ln, sched), "cuda": cuda_kernel(ln, sched, kernel_schedule(ln, sched)),
             "metal": metal_kernel(ln, sched)}
    for lang, (space, index, sum_t, cast) in {"c++": ("", "int64_t", "double", "(double)"),
                                              "cuda": ("", "long long", "double", ""),
                                              "metal": ("device ", "long", "float", "")}.items():
        text = texts[lang]
        assert re.search(rf"\n\s+{space}const float\* p\d+ = a\d+ \+ r \* cols;", text), lang
        assert f"for ({index} c = 0; c < cols; ++c) {{" in text, lang
        assert re.search(rf"\n\s+{sum_t} acc_\w+ = 0\.0f?;", text), lang
        assert re.search(rf"acc_\w+ \+= {re.escape(cast)}v_", text), lang
    assert "device " not in texts["cuda"] and "long long" not in texts["metal"] and "double" not in texts["metal"]


def test_math_wrappers_use_each_dialects_library_names():
    assert math_wrappers(CPP, ("rint",)) == "static inline float kf_rint(float x) { return std::nearbyint(x); }\n"
    assert "return powf(a, b);" in math_wrappers(CUDA, ("pow",)) and "__device__" in math_wrappers(CUDA, ("pow",))
    metal = math_wrappers(METAL, ("fabs", "sqrt"))
    assert "return fabs(x);" in metal and "return precise::sqrt(x);" in metal


def test_every_composite_row_operator_has_a_template():
    plain = {"sum", "mean", "amax", "amin", "max", "min"}  # lowered as one reduction each
    index_outputs = {"argmax", "argmin"}  # int64 outputs: rowops._arg_reduction (an extreme, then its first column)
    assert set(ROW_TEMPLATES) == ROW_OPS - plain - index_outputs - {"group_norm"}
