"""Triton target checks that need no GPU: availability reasons, compile errors mapped to candidate lines, static
rules on Triton candidates. GPU runs: tests/gpu/."""

from __future__ import annotations

import ast
import types
import importlib.util
from pathlib import Path

import pytest
import torch

from kforge_core.platform import get_platform
from kforge_core.eval.rules import check_candidate
from platforms import triton as tp

HERE = Path(__file__).parent
CANDIDATES = HERE / "gpu" / "cases"


def test_registered_with_gpu_attributes():
    p = get_platform("triton")
    assert p.device_type == "cuda" and p.kernel_language == "python" and p.formats == ("triton",)
    assert p.candidate_api == () and p.module_name == "platforms.triton"
    assert p.limit_address_space is False and p.strict_fp32_controls is True
    assert p.example().candidate.exists()


def test_module_does_not_shadow_the_triton_package():
    # platforms/triton.py imports `triton` absolutely; a candidate's `import triton` is the real package
    assert tp.__name__ == "platforms.triton"
    spec = importlib.util.find_spec("triton")
    assert spec is None or "platforms" not in (spec.origin or "")


@pytest.mark.skipif(torch.version.cuda is not None, reason="checks the message of a CPU-only torch build")
def test_availability_explains_cpu_only_torch():
    a = get_platform("triton").availability()
    assert not a.ok and "torch was built without CUDA" in a.reason


def test_candidates_pass_static_rules():
    p = get_platform("triton")
    for path in [p.example().candidate, *sorted(CANDIDATES.glob("triton_*.py"))]:
        v = check_candidate(path.read_text(), p.module_name, p.candidate_api, allow_inline_asm=p.allows_inline_asm)
        assert v == [], (path.name, v)


class _FakeJit:
    """What compile_error_from_triton reads from a JITFunction."""

    def __init__(self, text: str, name: str):
        lines = text.splitlines(keepends=True)
        start = next(i for i, ln in enumerate(lines) if ln.startswith("@triton.jit") and
                     lines[i + 1].startswith(f"def {name}("))
        end = next((j for j in range(start + 2, len(lines)) if lines[j].strip() and not lines[j][0].isspace()),
                   len(lines))
        self.raw_src = lines[start:end]
        self.starting_line_number = start + 1
        self.src = "".join(self.raw_src[1:])
        self.fn = types.SimpleNamespace(__name__=name)


class CompilationError(Exception):  # same name and shape as triton.compiler.errors.CompilationError
    def __init__(self, src, node, error_message):
        self.src, self.node, self.error_message = src, node, error_message
        super().__init__(f"at {node.lineno}:{node.col_offset}:\n{error_message}")


def test_triton_compile_error_maps_to_candidate_line():
    text = (CANDIDATES / "triton_compile_error.py").read_text()
    jf = _FakeJit(text, "swish_bias_kernel")
    node = ast.parse("x").body[0]
    node.lineno, node.col_offset = 7, 31  # line 7 of the kernel's own source (def = 1)
    try:
        try:
            raise NameError("Cannot access global variable not_defined_anywhere from within @jit'ed function")
        except NameError as inner:
            raise CompilationError(jf.src, node, repr(inner)) from inner
    except CompilationError as e:
        err = tp.compile_error_from_triton(e, "swish_bias_kernel", [jf])
        assert tp._is_compile_failure(e)
    assert "candidate line 16" in str(err), str(err)
    assert "not_defined_anywhere" in str(err)
    assert "candidate line 16" in err.log


def test_nested_jit_error_names_the_helper_and_the_call_site():
    text = '''import triton
import triton.language as tl


@triton.jit
def helper(x):
    return x + missing


@triton.jit
def kernel(p):
    v = tl.load(p)
    tl.store(p, helper(v))
'''
    helper, kernel = _FakeJit(text, "helper"), _FakeJit(text, "kernel")
    n_inner, n_outer = ast.parse("a").body[0], ast.parse("b").body[0]
    n_inner.lineno, n_inner.col_offset = 2, 15
    n_outer.lineno, n_outer.col_offset = 3, 16
    try:
        try:
            raise CompilationError(helper.src, n_inner, "NameError('missing is not defined')")
        except CompilationError as inner:
            raise CompilationError(kernel.src, n_outer, None) from inner
    except CompilationError as e:
        err = tp.compile_error_from_triton(e, "kernel", [helper, kernel])
    assert "candidate line 7 in helper" in str(err), str(err)
    assert "called from candidate line 13 (kernel)" in str(err), str(err)
    assert "missing is not defined" in str(err)


def test_out_of_resources_is_a_compile_error():
    class OutOfResources(Exception):
        def __str__(self):
            return "out of resource: shared memory, Required: 300000, Hardware limit: 232448."

    err = tp.compile_error_from_triton(OutOfResources(), "big_kernel", [])
    assert "big_kernel cannot run on this GPU" in str(err) and "shared memory" in str(err)
    assert tp._is_compile_failure(OutOfResources())
    assert not tp._is_compile_failure(ValueError("x"))
