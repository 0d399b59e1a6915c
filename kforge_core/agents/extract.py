"""Find the candidate program in a model's reply.

Models answer in many shapes; this module turns any of them into one program or one clear reason why there is none:

  * fenced blocks (```python, ```py, ```python3, bare ```, ~~~), several of them: the Python block that defines
    `class ModelNew` (or the paper's `NewModel`) wins; among several such blocks the last one (models show a draft,
    then the fix), with the earlier ones as `alternatives` the loop evaluates, nearest first, while the one
    before did not compile (a draft that compiles beats a final version that does not);
  * kernel source in its own ```cpp / ```cuda / ```metal block, referenced by the Python block through a name it never
    defines (`compile_cpp(SOURCE)` with no `SOURCE = ...`): the kernel is bound to that name as a raw string at the
    top of the program, and a note says so; when the names and blocks cannot be paired unambiguously the reply is
    refused with a reason that tells the model what to do;
  * no fence at all: the whole reply (or the reply from its first import on) when it parses and defines ModelNew;
  * an unclosed last fence (the model stopped, or was cut off): the text up to the end counts as the block.

A block that defines ModelNew but does not parse is still returned: the evaluator turns it into a `compile_error`
verdict with the candidate's line number, which is more useful feedback than "no program".
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
from dataclasses import dataclass

from ..pyast import parse_ast

MODEL_CLASSES = ("ModelNew", "NewModel")
PYTHON_TAGS = frozenset({"python", "py", "python3", "py3", "ipython", "pycon"})
# Tags of blocks that hold kernel source (never the program itself).
KERNEL_TAGS = frozenset({"cpp", "c++", "cxx", "cc", "c", "h", "hpp", "cuda", "cu", "metal", "msl", "objc",
                         "objective-c", "glsl", "hlsl", "opencl", "cl", "asm", "ptx"})
_FENCE = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.MULTILINE)
_MODEL_CLASS_RE = re.compile(r"^\s*class\s+(%s)\b" % "|".join(MODEL_CLASSES), re.MULTILINE)
_BUILTIN_NAMES = frozenset(dir(builtins)) | {"__name__", "__file__"}


@dataclass(frozen=True)
class Block:
    tag: str  # lower-cased first word of the info string ("" for a bare fence)
    text: str
    closed: bool  # False when the reply ended inside this block


@dataclass(frozen=True)
class Extraction:
    program: str | None
    error: str | None = None  # why there is no program (shown to the user and fed back to the model)
    notes: str = ""  # how the program was found, when that is worth saying
    language: str = "python"
    complete: bool = True  # False when the program's code block was never closed (the reply may be cut short)
    alternatives: tuple[str, ...] = ()  # the reply's other complete programs, to try in this order when `program`
    # does not compile (the earlier blocks, nearest first)


def fenced_blocks(text: str) -> list[Block]:
    """All fenced blocks in order. A fence closes with the same character, at least as long (CommonMark)."""
    blocks: list[Block] = []
    pos = 0
    while True:
        opening = _FENCE.search(text, pos)
        if opening is None:
            return blocks
        fence = opening.group("fence")
        tag = (opening.group("info").strip().split() or [""])[0].lower().strip("{}.")
        start = opening.end() + 1
        closing_re = re.compile(r"^[ \t]{0,3}%s%s*[ \t]*$" % (re.escape(fence[0]) * 3, re.escape(fence[0])),
                                re.MULTILINE)
        closing = closing_re.search(text, start)
        while closing is not None and len(closing.group().strip()) < len(fence):
            closing = closing_re.search(text, closing.end())
        if closing is None:
            blocks.append(Block(tag, text[start:], closed=False))
            return blocks
        blocks.append(Block(tag, text[start:closing.start()], closed=True))
        pos = closing.end()


def defines_model(code: str) -> bool:
    return _MODEL_CLASS_RE.search(code) is not None


def extract_program(reply: str) -> Extraction:
    """The candidate program in `reply`, or an Extraction with `program=None` and a reason."""
    if not reply or not reply.strip():
        return Extraction(None, "the reply was empty")
    blocks = fenced_blocks(reply)
    if not blocks:
        return _unfenced(reply)
    python_blocks = [b for b in blocks if _is_python(b)]
    with_model = [b for b in python_blocks if defines_model(b.text)]
    kernel_blocks = [b for b in blocks if b.tag in KERNEL_TAGS]
    if not with_model:
        return _no_model_block(reply, blocks, python_blocks, kernel_blocks)
    chosen = with_model[-1]
    notes = []
    alternatives: list[str] = []
    if len(with_model) > 1:
        for block in reversed(with_model[:-1]):
            alt, _, alt_error = _bind_kernel_blocks(textwrap.dedent(block.text), kernel_blocks)
            if block.closed and not alt_error:
                alternatives.append(alt.strip("\n") + "\n")
        notes.append(f"the reply held {len(with_model)} programs defining ModelNew; the last one is tried first"
                     + (", the earlier ones when it does not compile" if alternatives else ""))
    if not chosen.closed:
        notes.append("the last code block was not closed; its text up to the end of the reply was used")
    code = textwrap.dedent(chosen.text)
    code, bound, error = _bind_kernel_blocks(code, kernel_blocks)
    if error:
        return Extraction(None, error)
    if bound:
        notes.append(bound)
    return Extraction(code.strip("\n") + "\n", notes="; ".join(notes), complete=chosen.closed,
                      alternatives=tuple(alternatives))


def _is_python(block: Block) -> bool:
    if block.tag in PYTHON_TAGS:
        return True
    if block.tag:
        return False
    # A bare fence: Python when it parses as Python or at least looks like the program.
    return defines_model(block.text) or _parses(block.text)


def _parses(code: str) -> bool:
    try:
        parse_ast(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _unfenced(reply: str) -> Extraction:
    text = reply.strip("\n")
    if defines_model(text):
        if _parses(text):
            return Extraction(text + "\n", notes="the reply had no code fence; the whole reply was used")
        # Prose before the code: start at the first import line.
        m = re.search(r"^(import|from)\s+\w", text, re.MULTILINE)
        if m and _parses(text[m.start():]):
            return Extraction(text[m.start():] + "\n",
                              notes="the reply had no code fence; the code from its first import on was used")
    return Extraction(None, "the reply has no code block: put the complete program (imports, kernel source, "
                            "class ModelNew) in one ```python block")


def _no_model_block(reply: str, blocks: list[Block], python_blocks: list[Block],
                    kernel_blocks: list[Block]) -> Extraction:
    if kernel_blocks and not python_blocks:
        return Extraction(None, f"the reply has only kernel source (```{kernel_blocks[0].tag}) and no Python "
                                "program: give the complete program, with the kernel source as a string and "
                                "class ModelNew, in one ```python block")
    if defines_model(reply):  # e.g. ModelNew written outside the fences
        unfenced = _unfenced(re.sub(r"^(`{3,}|~{3,}).*$", "", reply, flags=re.MULTILINE))
        if unfenced.program:
            return Extraction(unfenced.program, notes="ModelNew was outside the code blocks; the reply's text "
                                                      "without its fences was used")
    return Extraction(None, f"none of the reply's {len(blocks)} code block(s) defines class ModelNew: put the "
                            "complete program in one ```python block")


# --------------------------------------------------------------------------------------------- kernel blocks


def _bind_kernel_blocks(code: str, kernel_blocks: list[Block]) -> tuple[str, str, str | None]:
    """Bind separate kernel blocks to the names the program uses without defining. Returns (code, note, error)."""
    if not kernel_blocks:
        return code, "", None
    try:
        tree = parse_ast(code)
    except (SyntaxError, ValueError):
        return code, "", None  # the evaluator will report the syntax error with its line
    free = _free_names(tree)
    if not free:
        return code, "", None  # the program is self-contained; the kernel blocks were illustrations
    kernels = [b for b in kernel_blocks if b.text.strip()]
    if len(free) != len(kernels):
        names = ", ".join(free)
        return code, "", (f"the program uses {names} without defining {'it' if len(free) == 1 else 'them'}, and "
                          f"the reply has {len(kernels)} separate kernel block(s) that cannot be matched to "
                          f"{'it' if len(free) == 1 else 'them'}: put the kernel source into the program as a string "
                          f"(e.g. {free[0]} = r\"\"\"...\"\"\") and give everything in one ```python block")
    lines = [f"{name} = {_raw_string(block.text)}" for name, block in zip(free, kernels)]
    insert_at = _after_imports(tree)
    code_lines = code.splitlines()
    new = code_lines[:insert_at] + ([""] if insert_at else []) + lines + [""] + code_lines[insert_at:]
    note = ", ".join(f"{name} from the ```{b.tag} block" for name, b in zip(free, kernels))
    return "\n".join(new) + "\n", f"kernel source given in a separate block was bound to the program ({note})", None


def _free_names(tree: ast.Module) -> list[str]:
    """Names read somewhere but bound nowhere in the module (nor builtins), in order of first use."""
    bound: set[str] = set()
    used: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif node.id not in used:
                used.append(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    return [n for n in used if n not in bound and n not in _BUILTIN_NAMES]


def _after_imports(tree: ast.Module) -> int:
    """The line index just after the leading docstring and imports (0-based, for splitlines())."""
    end = 0
    for node in tree.body:
        is_doc = isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
            and isinstance(node.value.value, str)
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (is_doc and end == 0):
            end = node.end_lineno or node.lineno
        else:
            break
    return end


def _raw_string(text: str) -> str:
    # The body ends with a newline, so a raw string cannot end in a lone backslash.
    body = text.strip("\n") + "\n"
    for quote in ('"""', "'''"):
        if quote not in body:
            return f"r{quote}\n{body}{quote}"
    return repr(body)  # both triple quotes occur in the kernel: fall back to an escaped literal
