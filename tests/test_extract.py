"""Extraction of the candidate program from model replies, over the shapes models really produce."""

from __future__ import annotations

import ast

import pytest

from kforge_core.agents.extract import extract_program, fenced_blocks

PROGRAM = '''import torch
import torch.nn as nn

from platforms.cpu import compile_cpp

SOURCE = r"""
extern "C" void k(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = x[i]; }
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lib = compile_cpp(SOURCE)

    def forward(self, x):
        out = torch.empty_like(x)
        self.lib.k(x, out, x.numel())
        return out
'''


def fence(code: str, tag: str = "python", mark: str = "```") -> str:
    return f"{mark}{tag}\n{code}{mark}\n"


@pytest.mark.parametrize("tag", ["python", "py", "python3", "Python", ""])
def test_single_fenced_block_any_python_tag(tag):
    got = extract_program(f"Here is my kernel.\n\n{fence(PROGRAM, tag)}\nIt fuses everything.")
    assert got.program == PROGRAM
    assert got.error is None and got.complete


def test_tilde_fence_and_info_string_with_attributes():
    got = extract_program(fence(PROGRAM, "python title=candidate.py", "~~~"))
    assert got.program == PROGRAM


def test_several_blocks_the_one_defining_modelnew_wins():
    reply = ("First, the original:\n" + fence("class Model:\n    pass\n") + "Usage example:\n" +
             fence("model = ModelNew()\nout = model(x)\n") + "The program:\n" + fence(PROGRAM) +
             "Shell:\n" + fence("pip install torch\n", "bash"))
    assert extract_program(reply).program == PROGRAM


def test_two_programs_the_last_one_is_used_with_a_note():
    draft = PROGRAM.replace("y[i] = x[i]", "y[i] = 0")
    got = extract_program(fence(draft) + "Wait, that is wrong. Fixed:\n" + fence(PROGRAM))
    assert got.program == PROGRAM
    assert "2 programs" in got.notes and "tried first" in got.notes
    assert got.alternatives == (draft,)  # tried when the last one does not compile


def test_alternatives_are_complete_earlier_programs_nearest_first():
    first, second = PROGRAM.replace("y[i] = x[i]", "y[i] = 1"), PROGRAM.replace("y[i] = x[i]", "y[i] = 2")
    got = extract_program(fence(first) + fence(second) + fence(PROGRAM))
    assert got.program == PROGRAM and got.alternatives == (second, first)
    assert extract_program(fence(PROGRAM)).alternatives == ()


def test_paper_name_newmodel_is_accepted():
    code = PROGRAM.replace("ModelNew", "NewModel")
    assert extract_program(fence(code)).program == code


def test_no_fence_whole_reply_when_it_parses():
    got = extract_program(PROGRAM)
    assert got.program == PROGRAM
    assert "no code fence" in got.notes


def test_no_fence_with_prose_before_the_code():
    got = extract_program("Sure! Here is the implementation you asked for.\n\n" + PROGRAM)
    assert got.program == PROGRAM


def test_no_code_at_all_is_a_clear_error():
    got = extract_program("I cannot help with kernels today, but here is a poem about GPUs.")
    assert got.program is None
    assert "no code block" in got.error and "```python" in got.error


def test_blocks_without_modelnew_are_an_error_naming_the_class():
    got = extract_program(fence("def relu(x):\n    return x.clamp(min=0)\n"))
    assert got.program is None and "ModelNew" in got.error


@pytest.mark.parametrize("reply", ["", "   \n\n  "])
def test_empty_reply(reply):
    assert extract_program(reply).error == "the reply was empty"


def test_unclosed_last_block_is_used_and_marked_incomplete():
    got = extract_program("Here:\n```python\n" + PROGRAM)
    assert got.program == PROGRAM
    assert not got.complete and "not closed" in got.notes


def test_block_that_does_not_parse_is_still_returned_for_the_evaluator():
    # The evaluator reports a Python syntax error with its candidate line: better feedback than "no program".
    broken = PROGRAM.replace("def forward(self, x):", "def forward(self, x)")
    got = extract_program(fence(broken))
    assert got.program == broken


def test_separate_cpp_block_is_bound_to_the_undefined_name():
    program = PROGRAM.replace('SOURCE = r"""\nextern "C" void k(const float* x, float* y, long n) '
                              '{ for (long i = 0; i < n; ++i) y[i] = x[i]; }\n"""\n', "")
    kernel = 'extern "C" void k(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = x[i]; }\n'
    got = extract_program("Kernel:\n" + fence(kernel, "cpp") + "Host code:\n" + fence(program))
    assert got.program is not None and got.error is None
    assert "SOURCE from the ```cpp block" in got.notes
    tree = ast.parse(got.program)
    assigned = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SOURCE"]
    assert assigned and assigned[0].value.value.strip() == kernel.strip()
    # bound after the imports, before the class that uses it
    lines = got.program.splitlines()
    assert lines.index(next(ln for ln in lines if ln.startswith("SOURCE"))) < \
        lines.index(next(ln for ln in lines if ln.startswith("class ModelNew")))


def test_kernel_blocks_that_cannot_be_matched_ask_for_one_block():
    program = PROGRAM.replace("compile_cpp(SOURCE)", "compile_cpp(KERNEL_A + KERNEL_B)").replace(
        'SOURCE = r"""', 'UNUSED = r"""')
    got = extract_program(fence("void a() {}\n", "cpp") + fence(program))
    assert got.program is None
    assert "KERNEL_A, KERNEL_B" in got.error and "one ```python block" in got.error


def test_illustrative_kernel_block_is_ignored_when_the_program_is_self_contained():
    got = extract_program(fence("__global__ void k() {}\n", "cuda") + fence(PROGRAM))
    assert got.program == PROGRAM and got.notes == ""


def test_only_a_kernel_block_is_an_error_asking_for_the_python_program():
    got = extract_program(fence('extern "C" void k() {}\n', "cpp"))
    assert got.program is None and "only kernel source" in got.error


def test_kernel_with_triple_quotes_is_bound_safely():
    program = PROGRAM.replace('SOURCE = r"""\nextern "C" void k(const float* x, float* y, long n) '
                              '{ for (long i = 0; i < n; ++i) y[i] = x[i]; }\n"""\n', "")
    kernel = '// a comment with """ and \'\'\' in it\nextern "C" void k() {}\n'
    got = extract_program(fence(kernel, "cpp") + fence(program))
    namespace: dict = {}
    exec(compile(next(ln for ln in got.program.split("\n\n") if ln.startswith("SOURCE")), "<t>", "exec"), namespace)
    assert namespace["SOURCE"].strip() == kernel.strip()


def test_indented_fence_inside_a_list_item_is_dedented():
    indented = "".join("   " + ln if ln.strip() else ln for ln in PROGRAM.splitlines(keepends=True))
    got = extract_program("1. The program:\n   ```python\n" + indented + "   ```\n")
    assert got.program == PROGRAM


def test_fenced_blocks_need_a_closing_fence_as_long_as_the_opening():
    blocks = fenced_blocks("````python\nx = '```'\n```\ny = 1\n````\n")
    assert len(blocks) == 1 and "y = 1" in blocks[0].text and blocks[0].closed
