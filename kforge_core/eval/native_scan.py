"""The native-code rule (`native-no-os`) applied to kernel source text: C/C++/CUDA/Metal read as the preprocessor
would see it (comments dropped, digraph `#` and adjacent string literals joined), then scanned line by line for what
kernels never need."""

from __future__ import annotations

import re

from .refusals import Violation

# Native (C/C++/CUDA/Metal) source: what kernels never need. Word-boundary patterns over string literals.
_NATIVE_PATTERNS = [
    (r"\b(system|popen|fork|vfork|execl|execlp|execle|execv|execve|execvp|execvpe|fexecve|posix_spawnp?|clone)"
     r"\s*\(", "runs programs"),
    (r"\b(getenv|secure_getenv|environ|__environ|setenv|putenv)\b", "reads the environment"),
    (r"/proc\b", "reads /proc"),
    (r"\b(socket|connect|bind|dlopen|dlmopen|dlsym|syscall|ptrace|mprotect|prctl)\s*\(", "uses OS services"),
    (r"\b(fopen|fopen64|freopen|fdopen|opendir|open|open64|openat|creat|unlink|remove|rename|truncate)\s*\(",
     "does file I/O"),
    (r"\b(ifstream|ofstream|fstream|filebuf|std::filesystem)\b", "does file I/O"),
    (r"\b(pthread_create|std::thread|std::async|std::jthread)\b", "starts threads (OpenMP is allowed)"),
    # the GPU timer holds every stream of torch's pool until its start event; a stream of the candidate's own would
    # run work before the timed region starts
    (r"\b(cudaStreamCreate\w*|cuStreamCreate\w*)\s*\(",
     "creates a CUDA stream of its own (take one from torch's pool: at::cuda::getStreamFromPool() or "
     "torch.cuda.Stream())"),
    # kernels include system headers by name; a path (absolute, parent directory, home) or a macro would paste an
    # arbitrary file into the build log the agent reads
    (r"^\s*#\s*(include|include_next|import)\s*(?![<\"])\S", "uses a computed #include"),
    (r"^\s*#\s*(include|include_next|import)\s*[<\"]\s*(/|~|[^>\"]*\.\.)", "includes a file by path"),
    (r"\b(__has_include|__has_include_next)\b|#\s*embed\b", "probes or embeds files"),
    # the Python C API / pybind11 from a load_inline extension is Python without the static rules
    (r"\b(PyRun_\w*|PyImport_\w*|Py_CompileString\w*|PyEval_EvalCode\w*|PyEval_GetBuiltins|PySys_\w*|"
     r"PyMarshal_\w*|PyObject_SetAttr\w*|PyObject_GenericSetAttr)\b", "uses the Python C API to run Python"),
    (r"\bpy(bind11)?::(exec|eval|eval_file|globals|module_?::import|setattr|delattr|import)\b|"
     r"\bpybind11::(module_?::)?import\b", "uses pybind11 to run Python"),
]
_HOST_ASM = (r"\b(asm|__asm__|__asm)\b", "uses host inline assembly")

_C_STRING = r'"(?:[^"\\\n]|\\.)*"'
_ADJACENT_STRINGS = re.compile(rf"{_C_STRING}(?:\s*{_C_STRING})+")


def _join_strings(m: re.Match) -> str:
    text = m.group(0)
    parts = re.findall(_C_STRING, text)
    return '"' + "".join(p[1:-1] for p in parts) + '"' + "\n" * text.count("\n")


def _normalize_c(src: str) -> str:
    """What the preprocessor sees, as far as the scan needs it: digraph/trigraph `#` (`%:include`, `??=include`)
    and adjacent string literals joined (`"/pr" "oc"` is "/proc"; the newlines between them kept after it, so
    later lines keep their numbers)."""
    return _ADJACENT_STRINGS.sub(_join_strings, src.replace("%:", "#").replace("??=", "#"))


def strip_c_comments(src: str) -> str:
    """Remove // and /* */ comments, keeping line breaks so line numbers stay valid (the platforms' signature
    parsers read kernels through this too)."""
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def check_native_source(text: str, first_line: int = 1, allow_inline_asm: bool = False) -> list[Violation]:
    """Scan kernel source text; `first_line` is where the literal starts in the candidate file."""
    found = []
    patterns = list(_NATIVE_PATTERNS) + ([] if allow_inline_asm else [_HOST_ASM])
    body = _normalize_c(strip_c_comments(text))
    for i, line in enumerate(body.splitlines()):
        for pattern, what in patterns:
            m = re.search(pattern, line)
            if m:
                found.append(Violation("native-no-os", first_line + i,
                                       f"kernel source {what}: {m.group(0).strip()!r}"))
    return found
