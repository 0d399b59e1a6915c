"""Syntax highlighting with pygments (server-side, so the same colours everywhere) and kernel-source extraction.

Programs are Python (a `ModelNew` module); the kernels they build usually sit in string literals, shown separately
with the target's `kernel_language` lexer so C++/CUDA reads as C++/CUDA rather than as one long Python string.
"""

from __future__ import annotations

import ast
import functools
import html

from pygments import highlight as _highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from kforge_core.pyast import parse_ast

CSS_CLASS = "kf-code"
PYGMENTS_STYLE = "friendly"

# A string literal is shown as kernel source when it has several lines and looks like C-family code.
_KERNEL_MARKERS = ("#include", "__global__", "extern \"C\"", "kernel void", "#pragma", "__device__", "template <",
                   "@triton.jit", "tl.load(")
_MIN_KERNEL_LINES = 3


def style_css() -> str:
    """The pygments colours for `.kf-code` blocks (injected once per page)."""
    return HtmlFormatter(style=PYGMENTS_STYLE, cssclass=CSS_CLASS).get_style_defs(f".{CSS_CLASS}")


@functools.lru_cache(maxsize=256)
def to_html(code: str, language: str = "python", line_numbers: bool = True, first_line: int = 1) -> str:
    """`code` as highlighted HTML. An unknown language falls back to plain text rather than failing."""
    try:
        lexer = get_lexer_by_name(language or "text", stripnl=False, ensurenl=False)
    except ClassNotFound:
        lexer = get_lexer_by_name("text", stripnl=False)
    formatter = HtmlFormatter(style=PYGMENTS_STYLE, cssclass=CSS_CLASS, linenos="inline" if line_numbers else False,
                              linenostart=first_line, wrapcode=True)
    return _highlight(code, lexer, formatter)


def plain_html(text: str) -> str:
    """Preformatted text (logs) in the same frame as code, escaped."""
    return f'<div class="{CSS_CLASS} kf-log"><pre>{html.escape(text)}</pre></div>'


def kernel_sources(program: str) -> list[tuple[str, int, str]]:
    """[(name, first line in the program, source)] of the kernel sources embedded as string literals.

    The name is the variable the literal is assigned to (`SOURCE`, `cuda_src`), else "kernel source". A program
    that does not parse yields [] (its compile error is shown elsewhere)."""
    try:
        tree = parse_ast(program)
    except SyntaxError:
        return []
    names: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    names[id(node.value)] = t.id
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text.count("\n") + 1 >= _MIN_KERNEL_LINES and any(m in text for m in _KERNEL_MARKERS):
                # The literal's first line is the opening quote's line; a leading newline starts the code one later.
                first = node.lineno + (1 if text.startswith("\n") else 0)
                found.append((names.get(id(node), "kernel source"), first, text.strip("\n")))
    found.sort(key=lambda item: item[1])
    return found


# Where a kernel's own text starts inside its source: the lines before it (includes, math helpers, offset helpers)
# are the source's prelude, the same in every program of a target.
_KERNEL_STARTS = ('extern "C"', "__global__", "kernel void", "@triton.jit", "template <", "template<")
_LABEL_PREFIXES = ("//", "#")


def prelude_lines(source: str) -> int:
    """How many leading lines of a kernel source come before its first kernel (with the comment lines just above
    it, which name what the kernel computes); 0 when no kernel start is recognised (then all of it is shown)."""
    lines = source.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith(_KERNEL_STARTS)), None)
    if start is None:
        return 0
    while start > 0 and lines[start - 1].lstrip().startswith(_LABEL_PREFIXES) \
            and not lines[start - 1].lstrip().startswith(("#include", "#define", "#pragma", "import", "#if")):
        start -= 1
    return start


# The built-in synthesizer's one-line JSON marker (kforge_core.synth.schedule.MARKER) as pygments writes it: a
# comment span. It gets a class of its own so the stylesheet wraps it inside the pane instead of running off it.
_MARKER_SPAN = '<span class="c1"># kforge-builtin:'


def wrap_marker(html_text: str) -> str:
    """Highlighted program HTML with the built-in marker's line wrapping (class `kf-marker`)."""
    return html_text.replace(_MARKER_SPAN, '<span class="c1 kf-marker"># kforge-builtin:', 1)


_DIFF_STYLE = """<style>
table.diff {font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; border-collapse: collapse;
            width: 100%; table-layout: fixed}
table.diff td {padding: 0 4px; vertical-align: top; white-space: pre-wrap; word-break: break-all}
table.diff td.diff_header {color: #868e96; text-align: right; width: 3em}
table.diff td.diff_next {display: none}
table.diff th {display: none}
.diff_add {background: #d3f9d8} .diff_chg {background: #fff3bf} .diff_sub {background: #ffe3e3}
</style>"""


def side_by_side_diff(old: str, new: str, context: int = 3) -> str:
    """Two programs side by side as an HTML table, changed lines highlighted (green added, yellow changed, red
    removed), unchanged stretches folded to `context` lines."""
    import difflib

    table = difflib.HtmlDiff(tabsize=4, wrapcolumn=90).make_table(
        old.splitlines(), new.splitlines(), context=True, numlines=context)
    return _DIFF_STYLE + table
