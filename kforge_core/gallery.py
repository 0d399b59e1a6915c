"""The problem gallery: KernelBench-format problems shipped in ``assets/problems/level{1,2,3}/``.

Each problem file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()``; sizes are module-level
globals read at call time, so a *size class* is chosen by overriding globals:

* ``"gpu"`` - the file's defaults (sized so the reference takes >= ~1 ms on an H100);
* ``"cpu"`` - the file's ``CPU_SIZES`` dict (reference forward in roughly 5-50 ms on a small CPU).

Listing is static (``ast``; nothing is imported or executed, torch is not needed). ``load_module``
executes the file. This module depends on nothing else in ``kforge_core``; the evaluation harness reads
``CPU_SIZES`` through ``declared_cpu_sizes`` here.
"""
from __future__ import annotations

import ast
import difflib
import importlib.util
import itertools
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Union

__all__ = [
    "GALLERY_DIR",
    "SIZE_CLASSES",
    "GalleryProblem",
    "ProblemNotFound",
    "list_problems",
    "get_problem",
    "size_overrides",
    "declared_cpu_sizes",
    "load_module",
]

GALLERY_DIR: Path = Path(__file__).resolve().parent.parent / "assets" / "problems"
SIZE_CLASSES: tuple[str, ...] = ("gpu", "cpu")
CPU_SIZES_NAME = "CPU_SIZES"

_LEVEL_DIR = re.compile(r"^level(\d+)$")
_counter = itertools.count()

# Words whose capitalisation a plain str.capitalize() gets wrong, for titles derived from file names.
_TITLE_WORDS = {
    "relu": "ReLU", "gelu": "GELU", "silu": "SiLU", "swiglu": "SwiGLU", "tanh": "Tanh",
    "layernorm": "LayerNorm", "rmsnorm": "RMSNorm", "groupnorm": "GroupNorm", "batchnorm": "BatchNorm",
    "bn": "BN", "mlp": "MLP", "cnn": "CNN", "qkv": "QKV", "gemm": "GEMM", "conv": "Conv",
    "conv2d": "Conv2d", "conv3x3": "Conv3x3", "resnet": "ResNet", "vit": "ViT", "l2norm": "L2Norm",
    "bf16": "bf16", "fp16": "fp16", "logsumexp": "LogSumExp", "rope": "RoPE",
}


@dataclass(frozen=True)
class GalleryProblem:
    """One gallery problem. ``name`` is ``"level<N>/<stem>"``, e.g. ``"level1/01_relu"``."""

    name: str
    level: int
    path: Path
    description: str  # first line of the module docstring
    title: str  # human-readable, derived from the file name ("Linear Bias GELU")

    @property
    def source(self) -> str:
        return self.path.read_text(encoding="utf-8")


class ProblemNotFound(KeyError):
    """Unknown gallery problem name. A ``KeyError`` whose ``str()`` is a readable message."""

    def __init__(self, name: str, suggestions: list[str] | None = None):
        self.name = name
        self.suggestions = list(suggestions or [])
        super().__init__(name)

    def __str__(self) -> str:
        msg = f"no gallery problem named {self.name!r}"
        if self.suggestions:
            msg += "; did you mean: " + ", ".join(self.suggestions) + "?"
        else:
            msg += f" (see list_problems(); gallery at {GALLERY_DIR})"
        return msg


# --------------------------------------------------------------------------------------------- listing

def _title_from_stem(stem: str) -> str:
    words = [w for w in stem.split("_") if w]
    if words and words[0].isdigit():
        words = words[1:]
    out = []
    for w in words:
        t = _TITLE_WORDS.get(w.lower())
        if t is None:
            t = w if any(c.isupper() for c in w) else w.capitalize()
        out.append(t)
    return " ".join(out) or stem


def _docstring_first_line(path: Path) -> str:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError:
        return ""
    doc = ast.get_docstring(tree) or ""
    for line in doc.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _normalize_level(level: Union[int, str, None]) -> int | None:
    if level is None:
        return None
    if isinstance(level, bool):
        raise TypeError("level must be an int like 1 or a string like 'level1'")
    if isinstance(level, int):
        return level
    s = str(level).strip().lower()
    if s.startswith("level"):
        s = s[len("level"):]
    if not s.isdigit():
        raise ValueError(f"bad level {level!r}: expected 1, 2, 3 or 'level1' ...")
    return int(s)


def _problem_from_path(path: Path, level: int) -> GalleryProblem:
    return GalleryProblem(
        name=f"level{level}/{path.stem}",
        level=level,
        path=path,
        description=_docstring_first_line(path),
        title=_title_from_stem(path.stem),
    )


def list_problems(level: Union[int, str, None] = None) -> list[GalleryProblem]:
    """All gallery problems (optionally one level), sorted by level then file name."""
    want = _normalize_level(level)
    problems: list[GalleryProblem] = []
    if not GALLERY_DIR.is_dir():
        return problems
    level_dirs = []
    for d in GALLERY_DIR.iterdir():
        m = _LEVEL_DIR.match(d.name)
        if d.is_dir() and m:
            level_dirs.append((int(m.group(1)), d))
    for lvl, d in sorted(level_dirs):
        if want is not None and lvl != want:
            continue
        for path in sorted(d.glob("*.py")):
            if path.name.startswith("_"):
                continue
            problems.append(_problem_from_path(path, lvl))
    return problems


def get_problem(name: str) -> GalleryProblem:
    """Look a problem up by name (``"level1/01_relu"``; a trailing ``.py`` and backslashes are tolerated).

    Raises ``ProblemNotFound`` (a ``KeyError``) listing close matches when the name is unknown.
    """
    key = str(name).strip().replace("\\", "/")
    if key.endswith(".py"):
        key = key[:-3]
    problems = list_problems()
    by_name = {p.name: p for p in problems}
    if key in by_name:
        return by_name[key]
    names = list(by_name)
    close = difflib.get_close_matches(key, names, n=5, cutoff=0.5)
    # Also match on the stem alone ("01_relu", "relu") and on substrings ("softmax").
    stem = key.rsplit("/", 1)[-1]
    for n in names:
        s = n.rsplit("/", 1)[-1]
        bare = s.split("_", 1)[-1] if s[:1].isdigit() else s
        if n not in close and stem and (stem == s or stem == bare or stem.lower() in s.lower()):
            close.append(n)
    if not close:
        stems = {n.rsplit("/", 1)[-1]: n for n in names}
        close = [stems[s] for s in difflib.get_close_matches(stem, list(stems), n=5, cutoff=0.5)]
    raise ProblemNotFound(str(name), close[:8])


# ------------------------------------------------------------------------------------------ size classes

PathLike = Union[str, Path]
Source = Union[PathLike, GalleryProblem, types.ModuleType, Mapping[str, Any]]


def _resolve_path(src: Union[PathLike, GalleryProblem]) -> Path:
    if isinstance(src, GalleryProblem):
        return src.path
    p = Path(src)
    if p.is_file():
        return p
    # Allow a gallery name where a path is expected.
    if not p.suffix or not p.exists():
        try:
            return get_problem(str(src)).path
        except ProblemNotFound:
            pass
    raise FileNotFoundError(f"no problem file at {str(src)!r} (and no gallery problem by that name)")


def _static_cpu_sizes(path: Path) -> dict[str, Any] | None:
    """``CPU_SIZES`` read from the file without executing it (must be a literal dict)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = None
    for node in tree.body:
        targets: list[ast.expr] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if any(isinstance(t, ast.Name) and t.id == CPU_SIZES_NAME for t in targets):
            try:
                found = ast.literal_eval(value)
            except ValueError as e:
                raise ValueError(f"{path}: {CPU_SIZES_NAME} must be a literal dict") from e
    return found


def size_overrides(module_globals_or_path: Source, size_class: str) -> dict[str, Any]:
    """Global overrides for a size class: ``{}`` for ``"gpu"``, a copy of ``CPU_SIZES`` for ``"cpu"``.

    Accepts a module's globals dict, a module object, a ``GalleryProblem``, a file path, or a gallery
    name. A path is read statically (``CPU_SIZES`` must be a literal dict); nothing is executed.
    """
    sc = str(size_class).strip().lower()
    if sc not in SIZE_CLASSES:
        raise ValueError(f"unknown size class {size_class!r}; expected one of {SIZE_CLASSES}")
    if sc == "gpu":
        return {}
    src = module_globals_or_path
    where: str
    if isinstance(src, types.ModuleType):
        sizes, where = declared_cpu_sizes(src), getattr(src, "__file__", src.__name__)
    elif isinstance(src, Mapping):
        sizes, where = declared_cpu_sizes(src), str(src.get("__file__", "<globals>"))
    else:
        path = _resolve_path(src)
        sizes, where = _static_cpu_sizes(path), str(path)
    # Stricter than the evaluation harness, which takes a missing CPU_SIZES as "no overrides": a gallery problem
    # must declare its 'cpu' size class.
    if sizes is None:
        raise ValueError(f"{where}: no {CPU_SIZES_NAME} dict, so there is no 'cpu' size class")
    if not isinstance(sizes, Mapping) or not all(isinstance(k, str) for k in sizes):
        raise ValueError(f"{where}: {CPU_SIZES_NAME} must be a dict of global name -> value")
    return dict(sizes)


def declared_cpu_sizes(module_or_globals: Union[types.ModuleType, Mapping[str, Any]]) -> Any:
    """The ``CPU_SIZES`` a loaded problem (a module, or its globals) declares, unchecked; None when it has none.

    The one reading of it: ``size_overrides`` here checks it on top, and the evaluation harness
    (``kforge_core.eval.harness.loading.size_overrides``) applies it as it is.
    """
    if isinstance(module_or_globals, Mapping):
        return module_or_globals.get(CPU_SIZES_NAME)
    return getattr(module_or_globals, CPU_SIZES_NAME, None)


def load_module(path: Union[PathLike, GalleryProblem], size_class: str = "gpu") -> types.ModuleType:
    """Import a problem file as a fresh module (unique name) and apply the size-class overrides.

    Every call executes the file anew, so modules never share state. The module is registered in
    ``sys.modules`` under its unique name (``kforge_gallery_<stem>_<n>``) so that ``inspect`` and
    pickling by reference work. Raises ``ValueError`` if an override names a global the file lacks.
    """
    p = _resolve_path(path).resolve()
    safe_stem = re.sub(r"\W", "_", p.stem)
    mod_name = f"kforge_gallery_{safe_stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(mod_name, p)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {p}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    overrides = size_overrides(module, size_class)
    missing = sorted(k for k in overrides if k not in vars(module))
    if missing:
        sys.modules.pop(mod_name, None)
        raise ValueError(f"{p}: {CPU_SIZES_NAME} overrides unknown globals {missing}")
    vars(module).update(overrides)
    module.KFORGE_SIZE_CLASS = str(size_class).strip().lower()
    return module
