"""NVRTC compilation of CUDA C++ at run time: check the source, compile (cached), load, and return launchable kernels.

`compile_module` (the candidate-facing `platforms.cuda.compile_cuda`) checks includes and options, parses the
kernel signatures, compiles through NVRTC with the header stand-ins, maps NVRTC diagnostics to candidate lines,
loads the image with the driver and returns a `CudaModule`. Kernels are compiled to a CUBIN for the device's own
architecture (`sm_90` on H100/H200) whenever this NVRTC knows it, so the driver does no JIT at load; for a GPU newer
than NVRTC, PTX for the newest architecture NVRTC supports is loaded and JIT-compiled by the driver. Builds are
cached by source hash (`kforge_core.build_cache`), so a cached candidate costs one file read and `cuModuleLoadData`.

The pieces live in their own modules:
- `platforms.cuda._locate`: finding libnvrtc and the CUDA headers on disk (no loading);
- `platforms.cuda._binding`: the ctypes binding of NVRTC and the driver API (and why ctypes);
- `platforms.cuda._headers`: header stand-ins given to NVRTC in place of system headers;
- `platforms.cuda._signatures`: parsing the source's `__global__` signatures;
- `platforms.cuda._launch`: argument checks and launching compiled kernels.
"""

from __future__ import annotations

import ctypes
import json
import re
import time
from pathlib import Path

from kforge_core.build_cache import cached_build
from kforge_core.errors import CompileError
from kforge_core.eval.harness import context, launches
from kforge_core.source_map import map_diagnostics, source_start_line, summarize_errors

from ._binding import NvrtcNotFound, _Api, api
from ._headers import SHIM_HEADERS
from ._launch import CudaModule
from ._locate import include_dirs
from ._signatures import parse_kernels

__all__ = ["PROGRAM_NAME", "check_source", "check_options", "compile_error_from_log", "compile_module"]

PROGRAM_NAME = "kernel.cu"

# ---------------------------------------------------------------------------------------------------------------
# Source checks that need no GPU

_INCLUDE = re.compile(r'^\s*#\s*include(?:_next)?\s*([<"])([^>"]*)[>"]', re.M)
# options a candidate may pass; anything that reads files (-I, --pre-include, ...) or changes the target is ours
_OPTION_OK = re.compile(r"^(-D\S+|-U\S+|--use_fast_math|-use_fast_math|--fmad=(true|false)|-fmad=(true|false)|"
                        r"--ftz=(true|false)|-ftz=(true|false)|--prec-div=(true|false)|-prec-div=(true|false)|"
                        r"--prec-sqrt=(true|false)|-prec-sqrt=(true|false)|--maxrregcount=\d+|-maxrregcount=\d+|"
                        r"--std=c\+\+(11|14|17|20)|-std=c\+\+(11|14|17|20)|--extra-device-vectorization|"
                        r"-extra-device-vectorization|--restrict|-restrict|-lineinfo|--generate-line-info|"
                        r"--dopt=(on|off)|-dopt=(on|off)|-G|--device-debug|--ptxas-options=[-\w=,. ]+|"
                        r"-Xptxas=?[-\w=,. ]+|--disable-warnings|-w)$")


def check_source(source: str) -> list[str]:
    """Problems in the kernel source found without compiling: includes of paths outside the header search path."""
    problems = []
    for m in _INCLUDE.finditer(source):
        name = m.group(2).strip()
        line = source.count("\n", 0, m.start()) + 1
        if name.startswith(("/", "~")) or ".." in name.split("/") or "\\" in name:
            problems.append(f"kernel line {line}: #include {m.group(1)}{name} — only header names (cuda_fp16.h, "
                            f"cstdint, ...) may be included, not paths")
    return problems


def check_options(options) -> list[str]:
    bad = []
    for o in options:
        if not isinstance(o, str) or not _OPTION_OK.match(o.strip()):
            bad.append(str(o))
    if bad:
        return [f"NVRTC option(s) not allowed: {', '.join(bad)} (allowed: -D/-U macros, --use_fast_math, --fmad, "
                f"--ftz, --prec-div, --prec-sqrt, --maxrregcount, --std, -lineinfo, --ptxas-options, ...)"]
    return []


# ---------------------------------------------------------------------------------------------------------------
# Diagnostics

def compile_error_from_log(log: str, source: str, candidate_text: str, what: str = "CUDA compilation (NVRTC)"):
    """A CompileError whose message names candidate lines, from an NVRTC log on `kernel.cu`."""
    start = source_start_line(source, candidate_text)
    mapped, diags = map_diagnostics(log, (PROGRAM_NAME,), start, source)
    summary = summarize_errors(diags)
    if not summary:
        lines = [ln for ln in log.strip().splitlines() if ln.strip()]
        summary = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "unknown error")
    return CompileError(f"{what} failed: {summary}", log=mapped)


# ---------------------------------------------------------------------------------------------------------------
# Compile

def _device_arch(device_index: int) -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(device_index)


def _target(a: _Api, device_index: int, arch: str | None) -> tuple[str, str]:
    """(--gpu-architecture value, "cubin" | "ptx")."""
    if arch:
        if not re.fullmatch(r"(sm|compute)_\d+[af]?", arch):
            raise CompileError(f"arch={arch!r}: expected sm_XY, sm_XYa or compute_XY")
        return arch, ("ptx" if arch.startswith("compute_") or a.nvrtcGetCUBIN is None else "cubin")
    major, minor = _device_arch(device_index)
    cc = major * 10 + minor
    if a.nvrtcGetCUBIN is not None and (not a.supported_archs or cc in a.supported_archs):
        return f"sm_{cc}", "cubin"
    older = [x for x in a.supported_archs if x <= cc]
    if not older:
        raise CompileError(f"this NVRTC {a.nvrtc_version} supports none of sm_{cc}'s architectures "
                           f"(supports {a.supported_archs})")
    return f"compute_{max(older)}", "ptx"


def _nvrtc_compile(a: _Api, source: str, options: list[str], names: list[str], kind: str):
    prog = ctypes.c_void_p()
    hdr_names = list(SHIM_HEADERS)
    hdrs = (ctypes.c_char_p * len(hdr_names))(*[SHIM_HEADERS[h].encode() for h in hdr_names])
    inc = (ctypes.c_char_p * len(hdr_names))(*[h.encode() for h in hdr_names])
    code = a.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), PROGRAM_NAME.encode(), len(hdr_names), hdrs, inc)
    if code != 0:
        raise CompileError(f"nvrtcCreateProgram failed: {a.nvrtc_error(code)}")
    try:
        for n in names:
            a.nvrtcAddNameExpression(prog, n.encode())
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        code = a.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        a.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        a.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if code != 0:
            return None, {}, log, code
        get_size, get = (a.nvrtcGetCUBINSize, a.nvrtcGetCUBIN) if kind == "cubin" else (a.nvrtcGetPTXSize,
                                                                                         a.nvrtcGetPTX)
        get_size(prog, ctypes.byref(size))
        image = ctypes.create_string_buffer(size.value)
        get(prog, image)
        lowered = {}
        for n in names:
            out = ctypes.c_char_p()
            if a.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(out)) == 0 and out.value:
                lowered[n] = out.value.decode()
        return image.raw, lowered, log, 0
    finally:
        a.nvrtcDestroyProgram(ctypes.byref(prog))


def build_image(directory: Path, *, source: str, opts: list[str], kind: str, target: str, launchable: list[str],
                nvrtc: str, driver: str, _candidate_text: str | None = None) -> None:
    """The registered builder (`kforge_core.build_cache.BUILDERS`): NVRTC output and its metadata, in a build
    child (NVRTC needs no device context). `nvrtc` and `driver` are part of the cache key only."""
    a = api()
    image, lowered, log, code = _nvrtc_compile(a, source, opts, launchable, kind)
    if image is None:
        if code == 6:  # NVRTC_ERROR_COMPILATION
            raise compile_error_from_log(log, source, _candidate_text or "")
        raise CompileError(f"NVRTC failed: {a.nvrtc_error(code)}", log=log)
    (directory / f"kernel.{kind}").write_bytes(image)
    (directory / "meta.json").write_text(json.dumps({"lowered": lowered, "log": log, "target": target}))


def _ensure_context(a: _Api, device_index: int) -> None:
    import torch

    torch.cuda.init()
    with torch.cuda.device(device_index):
        torch.cuda.current_stream(device_index)  # makes torch create/attach the primary context on this thread
        ctx = ctypes.c_void_p()
        a.cuCtxGetCurrent(ctypes.byref(ctx))
        if not ctx.value:
            dev = ctypes.c_int()
            a.check_cu(a.cuDeviceGet(ctypes.byref(dev), device_index), "cuDeviceGet")
            a.check_cu(a.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
            a.check_cu(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def compile_module(source: str, *, options=(), arch: str | None = None, device=None) -> "CudaModule":
    """See platforms.cuda.compile_cuda (the candidate-facing name)."""
    import torch

    if not isinstance(source, str) or not source.strip():
        raise CompileError("compile_cuda needs the CUDA C++ source as a non-empty string")
    options = [options] if isinstance(options, str) else list(options)
    problems = check_source(source) + check_options(options)
    if problems:
        raise CompileError("; ".join(problems))
    kernels = parse_kernels(source)
    if not kernels:
        raise CompileError('the source declares no __global__ kernel; write `extern "C" __global__ void '
                           'name(const float* x, float* out, int n) { ... }`')
    from ._common import cuda_problem

    problem = cuda_problem()
    if problem:
        raise CompileError(f"the CUDA target is not available: {problem}")
    try:
        a = api()
    except NvrtcNotFound as e:
        raise CompileError(str(e)) from None
    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    target, kind = _target(a, index, arch)
    incs = include_dirs()
    opts = [f"--gpu-architecture={target}", "--std=c++17", "-default-device", "-lineinfo",
            *(f"-I{d}" for d in incs), *options]
    launchable = [k for k, s in kernels.items() if not s.template]
    start = time.perf_counter()
    args = {"source": source, "opts": opts, "kind": kind, "target": target, "launchable": launchable,
            "nvrtc": repr(a.nvrtc_version), "driver": repr(a.driver_version) if kind == "ptx" else "",
            "_candidate_text": context.candidate_text}
    directory, cached = cached_build("cuda", args)
    build_s = time.perf_counter() - start
    launches.record_build("cuda", directory.name, cached, build_s)
    meta = json.loads((directory / "meta.json").read_text())
    image = (directory / f"kernel.{kind}").read_bytes()
    _ensure_context(a, index)
    module = ctypes.c_void_p()
    with torch.cuda.device(index):
        buf = ctypes.create_string_buffer(image + (b"\0" if kind == "ptx" else b""))
        code = a.cuModuleLoadData(ctypes.byref(module), buf)
    if code != 0:
        raise CompileError(f"loading the compiled kernels ({target} {kind}) failed: {a.cu_error(code)}")
    warnings = "\n".join(ln for ln in meta.get("log", "").splitlines() if ln.strip())
    if warnings:
        warnings, _ = map_diagnostics(warnings, (PROGRAM_NAME,), source_start_line(source, context.candidate_text),
                                      source)
    return CudaModule(a, module, kernels, meta.get("lowered", {}), index, target, cached, build_s, warnings,
                      str(directory))
