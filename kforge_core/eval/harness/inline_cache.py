"""KernelBench's `torch.utils.cpp_extension.load_inline`, accepted as is, with builds cached by source hash.

Installed in the child before the candidate is imported. A cache hit imports the built extension directly (no
ninja, no compiler: well under a second); a miss builds into a private directory which is then renamed into the
cache, so concurrent evaluations never share a half-built folder. Returned modules count launches of their functions.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import time
from pathlib import Path

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
                result = value(*args, **kwargs)
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


_BASELINE_CPP = "torch::Tensor kforge_baseline(torch::Tensor x);"
_BASELINE_CUDA = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
__global__ void kforge_baseline_kernel(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor kforge_baseline(torch::Tensor x) {
    auto y = torch::empty_like(x);
    kforge_baseline_kernel<<<1, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""


def _toolchain_imports(extra_cuda_cflags, extra_ldflags) -> frozenset[str]:
    """Symbols a trivial CUDA extension imports when built by the same toolchain with the same flags: the CUDA
    runtime and torch's headers bring them (a toolkit may link its runtime statically), not the candidate's code.
    Built once per toolchain and cached like any build; empty when the trivial build fails."""
    import torch

    key = digest("kforge toolchain baseline", _BASELINE_CPP, _BASELINE_CUDA, repr(extra_cuda_cflags),
                 repr(extra_ldflags), torch.__version__, str(torch.version.cuda), _cuda_arch_tag(_BASELINE_CUDA))
    name = f"kforge_baseline_{key[:12]}"

    def build(tmp: Path) -> None:
        with guards.trusted():
            _original(name=name, cpp_sources=_BASELINE_CPP, cuda_sources=_BASELINE_CUDA, functions=["kforge_baseline"],
                      extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags, build_directory=str(tmp),
                      verbose=False)

    try:
        directory, _ = cached_build("load_inline", key, build)
    except Exception:  # noqa: BLE001 - no baseline: the candidate's binary is vetted without allowances
        return frozenset()
    return frozenset(native.imported_symbols(directory / f"{name}.so") or ())


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
                 _cuda_arch_tag(cuda), repr(sorted(kwargs.items())))
    module_name = f"{re.sub(r'[^A-Za-z0-9_]', '_', str(name))}_{key[:12]}"
    start = time.perf_counter()

    def build(tmp: Path) -> None:
        try:
            with guards.trusted():
                _original(name=module_name, cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions,
                          extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                          extra_include_paths=extra_include_paths, build_directory=str(tmp), verbose=False,
                          with_cuda=with_cuda, is_python_module=True, **kwargs)
        except Exception as e:  # noqa: BLE001 - torch raises RuntimeError with the build log
            summary, log = _map_build_error(str(e), tmp, [cpp, cuda])
            first = summary or (str(e).strip().splitlines() or ["unknown error"])[0][:300]
            raise CompileError(f"load_inline build of {name!r} failed: {first}", log=log) from None

    directory, cached = cached_build("load_inline", key, build)
    launches.record_build("load_inline", key, cached, time.perf_counter() - start)
    so = directory / f"{module_name}.so"
    allowed = frozenset()
    if cuda and native.denied_imports(so):  # measure what the CUDA toolchain itself imports, once per toolchain
        allowed = _toolchain_imports(extra_cuda_cflags, extra_ldflags)
    # syscall instructions are checked in host builds; CUDA toolchains may link their runtime statically
    native.vet_binary("load_inline", so, allowed=allowed, check_instructions=not cuda)
    with guards.trusted():
        module = _import_extension(module_name, directory / f"{module_name}.so")
    return TrackedExtension(module, str(name))


def install() -> None:
    global _original
    import torch.utils.cpp_extension as cpp_extension

    if _original is None:
        _original = cpp_extension.load_inline
        cpp_extension.load_inline = cached_load_inline
