"""KernelBench's `torch.utils.cpp_extension.load_inline`, accepted as is, with builds cached by source hash.

Installed in the child before the candidate is imported. A cache hit imports the built extension directly (no
ninja, no compiler: well under a second); a miss builds into a private directory which is then renamed into the
cache, so concurrent evaluations never share a half-built folder. Returned modules count launches of their functions.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import re
import time
from pathlib import Path
from time import perf_counter_ns as _clock  # bound at import, before any candidate code

from ...build_cache import cached_build, digest
from ...errors import CompileError
from ...source_map import source_start_line, summarize_errors
from . import context, guards, launches, native

_original = None


class TrackedExtension:
    """Proxy over the compiled extension module: every function call counts as a launch of a compiled kernel."""

    def __init__(self, module, name: str):
        self._module, self._name = module, name

    def __getattr__(self, attr: str):
        value = getattr(self._module, attr)
        if callable(value) and not attr.startswith("_"):
            def launch(*args, **kwargs):
                launches.record(f"{self._name}.{attr}")
                start = _clock()
                try:
                    result = value(*args, **kwargs)
                finally:
                    launches.add_kernel_time(_clock() - start)
                for t in (*args, *kwargs.values(), *(result if isinstance(result, (list, tuple)) else (result,))):
                    if hasattr(t, "data_ptr"):
                        launches.touch(t)
                return result

            return launch
        return value

    def __dir__(self):
        return dir(self._module)


def _as_text(sources) -> str:
    if sources is None:
        return ""
    return sources if isinstance(sources, str) else "\n".join(sources)


def _import_extension(name: str, path: Path):
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _map_build_error(message: str, build_dir: Path, sources: list[str]) -> str:
    """Rewrite `<file>:<line>:` in torch's build log to candidate lines, using the generated files on disk."""
    lines = []
    diags = []
    generated = {p.name: p.read_text() for p in build_dir.glob("*") if p.suffix in (".cpp", ".cu")}
    for raw in message.splitlines():
        m = re.search(r"([\w./-]+\.(?:cpp|cu))[:(](\d+)", raw)
        if m and Path(m.group(1)).name in generated:
            text = generated[Path(m.group(1)).name]
            k = int(m.group(2))
            for src in sources:
                off = source_start_line(src, text) if src else None
                cand = source_start_line(src, context.candidate_text) if src else None
                if off is not None and off <= k < off + src.count("\n") + 1:
                    kernel_line = k - off + 1
                    where = f"candidate line {cand + kernel_line - 1}" if cand else f"kernel line {kernel_line}"
                    rest = raw[m.end():].lstrip(":0123456789) ")
                    raw = f"{where}: {rest}"
                    if "error" in rest:
                        diags.append({"line": cand + kernel_line - 1 if cand else None, "kernel_line": kernel_line,
                                      "message": rest})
                    break
        lines.append(raw)
    summary = summarize_errors(diags)
    return summary, "\n".join(lines)


def _cuda_arch_tag(cuda_source: str) -> str:
    """CUDA builds hold machine code for the architectures torch compiled for: part of the cache key."""
    import os

    import torch

    if not cuda_source:
        return ""
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{arch_list}|sm_{major}{minor}"
    return arch_list


def _trusted_header_dirs() -> tuple[str, ...]:
    """Where the headers a torch extension includes live: the compiler's own, torch's, Python's, CUDA's."""
    import os
    import sysconfig

    import torch.utils.cpp_extension as cpp_extension

    dirs = [*cpp_extension.include_paths(), sysconfig.get_paths().get("include", "")]
    if cpp_extension.CUDA_HOME:
        dirs.append(os.path.join(cpp_extension.CUDA_HOME, "include"))
    cxx = os.environ.get("CXX", "c++")
    return tuple(os.path.realpath(d) for d in dirs if d) + native.system_include_dirs(cxx)


def _ninja_deps(build_dir: Path) -> list[str]:
    """The files each object was compiled from and read besides system headers (ninja keeps the compiler's -MMD
    lists in .ninja_deps; torch passes its own include directories as -isystem)."""
    import shutil
    import subprocess

    ninja = shutil.which("ninja")
    if ninja is None:
        return []
    with guards.trusted():
        proc = subprocess.run([ninja, "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True,
                              timeout=60)
    return [line.strip() for line in proc.stdout.splitlines() if line.startswith(" ") and line.strip()]


def _outside(entries: list[str], base: Path, dirs: tuple[str, ...]) -> list[str]:
    """The entries not under one of `dirs`: nvcc's dependency list (unlike g++'s -MMD) names every header it read,
    torch's and CUDA's included, and those are the trusted toolchain's, not the candidate's."""
    import os

    roots = tuple(d.rstrip("/") + "/" for d in dirs if d)
    return [e for e in entries if not os.path.realpath(base / e).startswith(roots)]


@contextlib.contextmanager
def _build_only():
    """torch's load_inline imports what it built, which runs the library's static initializers and module init
    (a TORCH_LIBRARY_IMPL registers kernels right there): build only, and import after the vetting."""
    import torch.utils.cpp_extension as cpp_extension

    original = cpp_extension._import_module_from_library
    cpp_extension._import_module_from_library = lambda *args, **kwargs: None
    try:
        yield
    finally:
        cpp_extension._import_module_from_library = original


def _toolchain_id(cuda: str) -> list[str]:
    """What the build depends on besides its arguments: part of the cache key."""
    import torch

    return [torch.__version__, str(torch.version.cuda), _cuda_arch_tag(cuda)]


def build_extension(directory: Path, *, module_name: str, kwargs: dict, toolchain: list[str], vetting: int | str,
                    name: str = "", _sources: list[str] | None = None, _candidate_text: str | None = None) -> None:
    """The registered builder (`kforge_core.build_cache.BUILDERS`): torch's own load_inline into `directory`, in a
    build child, without importing what it built; vetted before the caller publishes it (the files the compiler
    read, and the candidate's own objects). `toolchain` and `vetting` are part of the cache key only."""
    import torch.utils.cpp_extension as cpp_extension

    if _candidate_text is not None:
        context.candidate_text = _candidate_text
    build = _original or cpp_extension.load_inline
    cpp, cuda = (_sources or ["", ""])[:2]
    try:
        with guards.trusted(), _build_only():
            build(name=module_name, build_directory=str(directory), verbose=False, is_python_module=True, **kwargs)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError with the build log
        text = native.sanitize_compiler_log(str(e), ("main.cpp", "cuda.cu"), _trusted_header_dirs())
        summary, log = _map_build_error(text, directory, [cpp, cuda])
        first = summary or (text.strip().splitlines() or ["unknown error"])[0][:300]
        raise CompileError(f"load_inline build of {name or module_name!r} failed: {first}", log=log) from None
    native.vet_includes("load_inline", _outside(_ninja_deps(directory), directory, _trusted_header_dirs()),
                        {directory / "main.cpp", directory / "cuda.cu"}, directory)
    native.vet_objects("load_inline", sorted(directory.glob("*.o")), "load_inline_cuda" if cuda else "load_inline")


def cached_load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                       extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None, build_directory=None,
                       verbose=False, with_cuda=None, is_python_module=True, with_pytorch_error_handling=True,
                       keep_intermediates=True, use_pch=False, **kwargs):
    import torch

    cpp, cuda = _as_text(cpp_sources), _as_text(cuda_sources)
    # the exact text, names and flags torch will compile (other *_sources keywords, e.g. SYCL, are vetted too)
    extra_sources = [_as_text(v) for k, v in kwargs.items() if k.endswith("_sources")]
    native.vet_source("load_inline", cpp, cuda, *extra_sources)
    native.vet_names("load_inline", functions)
    native.vet_flags("load_inline", extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
                     extra_ldflags=extra_ldflags, extra_include_paths=extra_include_paths,
                     **{k: v for k, v in kwargs.items() if k.startswith("extra_") and k.endswith("flags")})
    key = digest(name, cpp, cuda, repr(functions), repr(extra_cflags), repr(extra_cuda_cflags), repr(extra_ldflags),
                 repr(extra_include_paths), repr(with_cuda), torch.__version__, str(torch.version.cuda),
                 _cuda_arch_tag(cuda), repr(sorted(kwargs.items())), native.VETTING_VERSION)
    module_name = f"{re.sub(r'[^A-Za-z0-9_]', '_', str(name))}_{key[:12]}"
    start = time.perf_counter()
    build_kwargs = {"cpp_sources": cpp_sources, "cuda_sources": cuda_sources, "functions": functions,
                    "extra_cflags": extra_cflags, "extra_cuda_cflags": extra_cuda_cflags,
                    "extra_ldflags": extra_ldflags, "extra_include_paths": extra_include_paths,
                    "with_cuda": with_cuda, **kwargs}
    # vetted when it is built (a refused build leaves no cache entry): the rules' version is in the key
    args = {"module_name": module_name, "name": str(name), "kwargs": build_kwargs, "toolchain": _toolchain_id(cuda),
            "vetting": native.VETTING_VERSION, "_sources": [cpp, cuda], "_candidate_text": context.candidate_text}
    directory, cached = cached_build("load_inline", args)
    launches.record_build("load_inline", directory.name, cached, time.perf_counter() - start)
    with guards.trusted():
        module = _import_extension(module_name, directory / f"{module_name}.so")
    return TrackedExtension(module, str(name))


def install() -> None:
    global _original
    import torch.utils.cpp_extension as cpp_extension

    if _original is None:
        _original = cpp_extension.load_inline
        cpp_extension.load_inline = cached_load_inline
