"""Problem kinds and the stratified order a bench runs its suite in.

A problem's kind comes from its file name (KernelBench names say their operators: `23_Softmax`,
`47_Sum_reduction_over_a_dimension`, `76_Gemm_Add_ReLU`) and, when the name says nothing a rule knows, from the
operators the file calls (`torch.softmax`, `nn.Conv2d`, `F.mse_loss`, ...). A single-operator problem (level 1, or
no level) gets the first kind of KINDS whose rule matches; a fused problem (level 2 and above) is `fused gemm`,
`fused conv` or `fused other` by the product at its heart.

The order: one problem of every kind first (in KINDS order), then the rest so that each kind's share of every
prefix stays close to its share of the suite (the kind furthest behind its share goes next). So a bench stopped
by its time limit after n problems has measured every kind (once n reaches the number of kinds) in about the
proportions of the whole suite. Within a kind, problems go by level, then by the number their file name
starts with (`level1/2_...` before `level1/10_...`).
"""

from __future__ import annotations

import ast
import re

from ..pyast import parse_ast
from .suite import SuiteProblem

# (kind, rule over the lower-cased file name or the names it calls), tried in this order for one-operator problems
SINGLE_KINDS: tuple[tuple[str, str], ...] = (
    ("loss", r"loss|crossentropy|kldiv|hinge|triplet|huber|cosine_?similarity"),
    ("conv", r"conv"),
    ("matmul", r"matmul|matrix|gemm|gemv|bmm|\bmm\b|linear|einsum|attention|matvec"),
    ("pooling", r"pool"),
    ("norm", r"norm"),
    ("softmax", r"softmax|logsumexp"),
    ("scan", r"cumsum|cumprod|cummax|cummin|scan"),
    ("elementwise", r"gelu|relu|elu\b|sigmoid|tanh|swish|softplus|softsign|mish|clamp"),  # before "min", "max"
    ("reduction", r"\b(sum|mean|max|min|prod|argmax|argmin|amax|amin|std|var)\b|reduc"),
)
ELEMENTWISE = "elementwise"
FUSED = (("fused conv", r"conv"), ("fused gemm", r"matmul|gemm|bmm|linear|einsum|\bmm\b|attention"))
FUSED_OTHER = "fused other"
KINDS = tuple(dict.fromkeys((ELEMENTWISE, *(k for k, _ in SINGLE_KINDS), *(k for k, _ in FUSED), FUSED_OTHER)))


def _name_words(stem: str) -> str:
    """`23_Softmax` -> "softmax"; `47_Sum_reduction_over_a_dimension` -> "sum reduction over a dimension"."""
    words = re.sub(r"^\d+_?", "", stem)
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", words)  # ConvTranspose -> Conv Transpose
    return re.sub(r"[_\-]+", " ", words).lower()


def _called_names(source: str) -> str:
    """The functions and modules the problem calls outside get_inputs/get_init_inputs, as words."""
    try:
        tree = parse_ast(source)
    except SyntaxError:
        return ""
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                f = sub.func
                names.append(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return " ".join(_name_words(n) for n in names if n)


def problem_kind(problem: SuiteProblem, source: str | None = None) -> str:
    """The problem's kind (one of KINDS); `source` the file's text (read from its path when None)."""
    if source is None:
        try:
            source = problem.path.read_text()
        except OSError:
            source = ""
    texts = (_name_words(problem.path.stem), _called_names(source))
    if (problem.level or 1) >= 2:
        for text in texts:
            for kind, rule in FUSED:
                if re.search(rule, text):
                    return kind
        return FUSED_OTHER
    for text in texts:
        for kind, rule in SINGLE_KINDS:
            if re.search(rule, text):
                return kind
    return ELEMENTWISE  # an activation, an arithmetic or other elementwise operator


def stratified(problems: list[SuiteProblem], kinds: dict[str, str]) -> list[SuiteProblem]:
    """`problems` reordered: one of each kind first, then each kind kept near its share of every prefix."""
    by_kind: dict[str, list[SuiteProblem]] = {}
    for p in sorted(problems, key=_file_number):
        by_kind.setdefault(kinds[p.name], []).append(p)
    order = [k for k in KINDS if k in by_kind] + [k for k in by_kind if k not in KINDS]
    taken = {k: 0 for k in order}
    out: list[SuiteProblem] = []
    for k in order:  # one of every kind first
        out.append(by_kind[k][0])
        taken[k] = 1
    total = len(problems)
    while len(out) < total:
        # the kind furthest behind its share of the suite at the next position (ties: KINDS order)
        n = len(out) + 1
        k = max((k for k in order if taken[k] < len(by_kind[k])),
                key=lambda k: (len(by_kind[k]) * n / total - taken[k], -order.index(k)))
        out.append(by_kind[k][taken[k]])
        taken[k] += 1
    return out


def _file_number(p: SuiteProblem) -> tuple:
    m = re.match(r"(\d+)", p.path.stem)
    return (p.level or 0, int(m.group(1)) if m else 1 << 30, p.name)
