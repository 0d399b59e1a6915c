"""NVRTC and the CUDA driver API through ctypes: compile CUDA C++ at run time, load it, launch it on torch tensors.

Why ctypes on libnvrtc + libcuda (and not CuPy or cuda-python): a CUDA build of torch already depends on both —
`libcuda.so.1` comes with the NVIDIA driver and torch's wheels pull in NVRTC (`nvidia-cuda-nvrtc`; torch's own
jiterator compiles through it) — so this path needs nothing that torch itself does not need. CuPy and cuda-python
are optional extras many users do not have, and CuPy launches on its own streams unless told otherwise. The binding
is small: ~12 NVRTC/driver functions, resolved once inside `guards.trusted()` (dlopen/dlsym are refused to candidate
code), then called directly.

Kernels are compiled to a CUBIN for the device's own architecture (`sm_90` on H100/H200) whenever this NVRTC knows
it, so the driver does no JIT at load; for a GPU newer than NVRTC, PTX for the newest architecture NVRTC supports is
loaded and JIT-compiled by the driver. Builds are cached by source hash (`kforge_core.build_cache`), so a cached
candidate costs one file read and `cuModuleLoadData`.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import re
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kforge_core.build_cache import cached_build, digest
from kforge_core.errors import CompileError
from kforge_core.harness import context, guards, launches
from kforge_core.source_map import map_diagnostics, source_start_line, summarize_errors

PROGRAM_NAME = "kernel.cu"

# ---------------------------------------------------------------------------------------------------------------
# Finding the libraries (no loading: availability() runs in the caller's process)


def _site_dirs() -> list[Path]:
    dirs = []
    for entry in sys.path:
        if entry and ("site-packages" in entry or "dist-packages" in entry) and os.path.isdir(entry):
            dirs.append(Path(entry))
    return dirs


def _torch_cuda_major() -> str | None:
    try:
        import torch

        return torch.version.cuda.split(".")[0] if torch.version.cuda else None
    except Exception:  # noqa: BLE001
        return None


def nvrtc_candidates() -> list[str]:
    """Paths (or sonames) to try for libnvrtc, best first: KFORGE_NVRTC, torch's wheel dependency, the toolkit."""
    found: list[str] = []
    explicit = os.environ.get("KFORGE_NVRTC")
    if explicit:
        found.append(explicit)
    patterns = []
    for site in _site_dirs():
        patterns += [str(site / "nvidia" / "*" / "lib" / "libnvrtc.so*"), str(site / "nvidia" / "*" / "lib64" /
                                                                            "libnvrtc.so*"),
                     str(site / "torch" / "lib" / "libnvrtc*.so*")]
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            patterns.append(os.path.join(os.environ[env], "lib64", "libnvrtc.so*"))
    patterns += ["/usr/local/cuda/lib64/libnvrtc.so*", "/usr/lib/x86_64-linux-gnu/libnvrtc.so*",
                 "/usr/lib64/libnvrtc.so*"]
    paths = []
    for pattern in patterns:
        for p in sorted(glob.glob(pattern)):
            if "builtins" not in os.path.basename(p) and p not in paths:
                paths.append(p)
    major = _torch_cuda_major()
    # the NVRTC matching torch's CUDA major first (same ABI as torch's own kernels), then newest first
    paths.sort(key=lambda p: (0 if major and re.search(rf"\.so\.{major}(\.|$)", p) else 1, -len(p)))
    found += paths
    for v in filter(None, (major, "13", "12", "11.2")):
        found.append(f"libnvrtc.so.{v}")
    found.append("libnvrtc.so")
    seen, out = set(), []
    for f in found:
        if f not in seen:
            seen.add(f)
            out.append(f)
    return out


def nvrtc_on_disk() -> str | None:
    """The first NVRTC library that exists as a file (without loading it), or None."""
    for c in nvrtc_candidates():
        if os.path.sep in c and os.path.isfile(c):
            return c
    return None


def include_dirs() -> list[str]:
    """Directories holding cuda_fp16.h & co. for NVRTC: torch's wheel dependency (nvidia-cuda-runtime), the toolkit."""
    dirs = []
    for site in _site_dirs():
        dirs += sorted(glob.glob(str(site / "nvidia" / "*" / "include")))
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs.append(os.path.join(os.environ[env], "include"))
    dirs.append("/usr/local/cuda/include")
    out = []
    for d in dirs:
        if os.path.isfile(os.path.join(d, "cuda_fp16.h")) and d not in out:
            out.append(d)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Headers NVRTC lacks (it has no C/C++ standard library); in-memory, looked up before any include directory.

_STDINT = """#pragma once
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t; typedef long long intptr_t; typedef unsigned long long uintptr_t;
#ifdef __cplusplus
namespace std { using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t; using ::uint8_t; using ::uint16_t;
using ::uint32_t; using ::uint64_t; using ::intptr_t; using ::uintptr_t; }
#endif
#define INT32_MAX 2147483647
#define INT32_MIN (-INT32_MAX - 1)
#define UINT32_MAX 4294967295u
#define INT64_MAX 9223372036854775807LL
"""
_CMATH = """#pragma once
namespace std {
using ::exp; using ::expf; using ::log; using ::logf; using ::sqrt; using ::sqrtf; using ::tanh; using ::tanhf;
using ::pow; using ::powf; using ::fabs; using ::fabsf; using ::fmax; using ::fmaxf; using ::fmin; using ::fminf;
using ::floor; using ::floorf; using ::ceil; using ::ceilf; using ::sin; using ::sinf; using ::cos; using ::cosf;
using ::erf; using ::erff; using ::exp2; using ::exp2f; using ::log2; using ::log2f; using ::fma; using ::fmaf;
using ::round; using ::roundf; using ::log1p; using ::log1pf; using ::expm1; using ::expm1f; using ::abs;
}
"""
SHIM_HEADERS = {
    "cstdint": _STDINT, "stdint.h": _STDINT, "cmath": _CMATH, "math.h": "#pragma once\n",
    "cuda_runtime.h": "#pragma once\n", "cuda_runtime_api.h": "#pragma once\n",
    "device_launch_parameters.h": "#pragma once\n", "cuda.h": "#pragma once\n", "cstddef": "#pragma once\n",
    "stddef.h": "#pragma once\n", "cfloat": "#pragma once\n#define FLT_MAX 3.402823466e+38F\n"
                                             "#define FLT_MIN 1.175494351e-38F\n#define FLT_EPSILON 1.192092896e-07F\n",
    "float.h": "#pragma once\n#define FLT_MAX 3.402823466e+38F\n#define FLT_MIN 1.175494351e-38F\n",
}

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
# Kernel signatures

def _torch_dtypes():
    import torch

    u = {k: getattr(torch, k) for k in ("uint16", "uint32", "uint64") if hasattr(torch, k)}
    f32, f64, f16, bf16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
    i8, u8, i16, i32, i64, b = torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool
    U16 = tuple(filter(None, (u.get("uint16"),)))
    U32 = tuple(filter(None, (u.get("uint32"),)))
    U64 = tuple(filter(None, (u.get("uint64"),)))
    # base type -> (accepted dtypes or None for any, required alignment in bytes)
    return {
        "float": ((f32,), 4), "double": ((f64,), 8), "__half": ((f16,), 2), "half": ((f16,), 2),
        "__nv_bfloat16": ((bf16,), 2), "nv_bfloat16": ((bf16,), 2), "__half2": ((f16,), 4), "half2": ((f16,), 4),
        "__nv_bfloat162": ((bf16,), 4), "nv_bfloat162": ((bf16,), 4),
        "float2": ((f32,), 8), "float4": ((f32,), 16), "double2": ((f64,), 16),
        "int": ((i32,), 4), "int32_t": ((i32,), 4), "signed": ((i32,), 4), "int2": ((i32,), 8), "int4": ((i32,), 16),
        "unsigned": ((i32, *U32), 4), "uint32_t": ((i32, *U32), 4), "uint2": ((i32, *U32), 8),
        "uint4": ((i32, *U32), 16),
        "long": ((i64,), 8), "int64_t": ((i64,), 8), "long long": ((i64,), 8), "ptrdiff_t": ((i64,), 8),
        "unsigned long": ((i64, *U64), 8), "uint64_t": ((i64, *U64), 8), "unsigned long long": ((i64, *U64), 8),
        "size_t": ((i64, *U64), 8), "longlong2": ((i64,), 16),
        "short": ((i16,), 2), "int16_t": ((i16,), 2), "unsigned short": ((i16, f16, bf16, *U16), 2),
        "uint16_t": ((i16, f16, bf16, *U16), 2),
        "char": ((i8, u8, b), 1), "signed char": ((i8,), 1), "int8_t": ((i8,), 1),
        "unsigned char": ((u8, b), 1), "uint8_t": ((u8, b), 1), "bool": ((b,), 1), "char4": ((i8,), 4),
        "uchar4": ((u8,), 4), "void": (None, 1),
    }


_SCALARS = {
    "float": (ctypes.c_float, "float"), "double": (ctypes.c_double, "float"),
    "int": (ctypes.c_int32, "int"), "int32_t": (ctypes.c_int32, "int"), "signed": (ctypes.c_int32, "int"),
    "unsigned": (ctypes.c_uint32, "int"), "uint32_t": (ctypes.c_uint32, "int"),
    "long": (ctypes.c_int64, "int"), "int64_t": (ctypes.c_int64, "int"), "long long": (ctypes.c_int64, "int"),
    "ptrdiff_t": (ctypes.c_int64, "int"), "unsigned long": (ctypes.c_uint64, "int"),
    "uint64_t": (ctypes.c_uint64, "int"), "unsigned long long": (ctypes.c_uint64, "int"),
    "size_t": (ctypes.c_uint64, "int"), "short": (ctypes.c_int16, "int"), "int16_t": (ctypes.c_int16, "int"),
    "unsigned short": (ctypes.c_uint16, "int"), "uint16_t": (ctypes.c_uint16, "int"),
    "char": (ctypes.c_int8, "int"), "signed char": (ctypes.c_int8, "int"), "int8_t": (ctypes.c_int8, "int"),
    "unsigned char": (ctypes.c_uint8, "int"), "uint8_t": (ctypes.c_uint8, "int"), "bool": (ctypes.c_bool, "bool"),
    "__half": (ctypes.c_uint16, "half"), "half": (ctypes.c_uint16, "half"),
    "__nv_bfloat16": (ctypes.c_uint16, "bf16"), "nv_bfloat16": (ctypes.c_uint16, "bf16"),
}
_POINTER_BASES = frozenset(["float", "double", "__half", "half", "__nv_bfloat16", "nv_bfloat16", "__half2", "half2",
                            "__nv_bfloat162", "nv_bfloat162", "float2", "float4", "double2", "int", "int32_t",
                            "signed", "int2", "int4", "unsigned", "uint32_t", "uint2", "uint4", "long", "int64_t",
                            "long long", "ptrdiff_t", "unsigned long", "uint64_t", "unsigned long long", "size_t",
                            "longlong2", "short", "int16_t", "unsigned short", "uint16_t", "char", "signed char",
                            "int8_t", "unsigned char", "uint8_t", "bool", "char4", "uchar4", "void"])
_QUAL = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|struct|__grid_constant__)\b")
_GLOBAL = re.compile(
    r"(?P<template>template\s*<[^;{}]*>\s*)?"
    r"(?:(?:extern\s+\"C\"|static|inline|__forceinline__|__noinline__)\s+)*"
    r"__global__\s+(?P<mid>(?:(?:__launch_bounds__|__cluster_dims__|__maxnreg__)\s*\([^()]*\)\s*|void\b\s*|"
    r"__noinline__\s+|static\s+|inline\s+)*)(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*(?:\([^()]*\)[^()]*)*)\)")


@dataclass(frozen=True)
class KParam:
    name: str
    base: str
    pointer: bool


@dataclass(frozen=True)
class KSignature:
    name: str
    params: tuple[KParam, ...]
    template: bool = False
    error: str = ""  # why it cannot be launched from Python, if it cannot

    def __str__(self) -> str:
        args = ", ".join(f"{p.base}{'*' if p.pointer else ''} {p.name}" for p in self.params)
        return f"__global__ void {self.name}({args})"


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def _parse_param(text: str, index: int) -> KParam:
    text = text.split("=")[0]  # default arguments
    text = _QUAL.sub(" ", text).replace("std::", " ").strip()
    pointer = "*" in text or "[]" in text
    if text.count("*") + text.count("[]") > 1:
        raise ValueError(f"parameter {text!r}: pointers to pointers cannot be passed from Python")
    if "&" in text:
        raise ValueError(f"parameter {text!r}: references cannot be kernel parameters")
    words = text.replace("*", " ").replace("[]", " ").split()
    if not words:
        raise ValueError("empty parameter")
    type_words = [w for w in words]
    # the last word is the name unless the whole thing is a type ("float*", "unsigned int")
    known = _POINTER_BASES | set(_SCALARS) | {"unsigned int", "long int", "signed int", "long long int",
                                               "unsigned long int", "unsigned long long int", "short int",
                                               "unsigned short int"}
    if len(words) > 1 and " ".join(words) not in known:
        name, type_words = words[-1], words[:-1]
    else:
        name = f"arg{index}"
    base = " ".join(type_words)
    base = re.sub(r"\b(unsigned|signed|long|short) int\b", r"\1", base).replace("long long int", "long long")
    base = base.replace("signed int", "signed").replace("unsigned long long int", "unsigned long long")
    if pointer and base not in _POINTER_BASES:
        raise ValueError(f"parameter {text!r}: pointer type {base}* is not supported from Python (use float, double, "
                         f"__half, __nv_bfloat16, float4, int32_t, int64_t, uint8_t, bool, void, ...)")
    if not pointer and base not in _SCALARS:
        raise ValueError(f"parameter {text!r}: type {base!r} cannot be passed by value from Python (pass scalars "
                         f"as float/double/int/int64_t/bool/__half, and arrays as pointers to tensors)")
    return KParam(name, base, pointer)


def parse_kernels(source: str) -> dict[str, KSignature]:
    """Every `__global__` function in the source: its parameters, or why it cannot be launched from Python."""
    src = _strip_comments(source)
    out: dict[str, KSignature] = {}
    for m in _GLOBAL.finditer(src):
        if "void" not in m.group("mid"):
            continue
        name = m.group("name")
        if m.group("template"):
            out[name] = KSignature(name, (), template=True,
                                   error=f"{name} is a template; launch an explicit instantiation through an "
                                         f'extern "C" __global__ wrapper')
            continue
        params_text = m.group("params").strip()
        try:
            params = () if params_text in ("", "void") else tuple(
                _parse_param(p, i) for i, p in enumerate(_split_params(params_text)))
        except ValueError as e:
            out[name] = KSignature(name, (), error=f"cannot launch {name} from Python: {e}")
            continue
        if name in out and out[name].params != params:
            out[name] = KSignature(name, (), error=f"{name} is overloaded; give each kernel its own name")
            continue
        out[name] = KSignature(name, params)
    return out


def _split_params(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


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
# The bindings

CU_ERRORS_HINTS = {
    700: "an illegal memory access (out-of-bounds index, wrong size, or a pointer to freed memory)",
    209: "no kernel image for this GPU (compiled for another architecture)",
    222: "the PTX is newer than this driver supports (upgrade the driver or use an older NVRTC)",
    701: "too many resources requested for launch (registers x threads per block exceed the SM's limit: lower "
         "the block size or add __launch_bounds__)",
    1: "an invalid argument (grid/block dimensions, shared memory size, or a parameter)",
}


class NvrtcNotFound(RuntimeError):
    pass


class _Api:
    """Resolved NVRTC + driver functions. Made once per process, inside guards.trusted()."""

    def __init__(self) -> None:
        with guards.trusted():
            self.nvrtc_path, self.nvrtc = self._load_nvrtc()
            try:
                self.cuda = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise NvrtcNotFound(f"the NVIDIA driver library libcuda.so.1 could not be loaded: {e}") from None
            self._resolve()

    @staticmethod
    def _load_nvrtc():
        errors = []
        for cand in nvrtc_candidates():
            try:
                lib = ctypes.CDLL(cand)
                if os.path.sep in cand:  # NVRTC dlopens its builtins by soname: load the ones beside it first
                    for b in sorted(glob.glob(os.path.join(os.path.dirname(cand), "libnvrtc-builtins.so*"))):
                        if ".alt." not in os.path.basename(b):
                            ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                            break
                return cand, lib
            except OSError as e:
                errors.append(f"{cand}: {str(e).split(':')[-1].strip()}")
        raise NvrtcNotFound("NVRTC not found (tried " + "; ".join(errors[:6]) + "). Install the nvidia-cuda-nvrtc "
                            "wheel matching torch's CUDA, or set KFORGE_NVRTC=/path/to/libnvrtc.so")

    def _resolve(self) -> None:
        n, c = self.nvrtc, self.cuda
        P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        sigs = {
            (n, "nvrtcVersion"): [ctypes.POINTER(I), ctypes.POINTER(I)],
            (n, "nvrtcGetErrorString"): [I],
            (n, "nvrtcCreateProgram"): [ctypes.POINTER(P), ctypes.c_char_p, ctypes.c_char_p, I,
                                        ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)],
            (n, "nvrtcDestroyProgram"): [ctypes.POINTER(P)],
            (n, "nvrtcCompileProgram"): [P, I, ctypes.POINTER(ctypes.c_char_p)],
            (n, "nvrtcGetProgramLogSize"): [P, ctypes.POINTER(S)],
            (n, "nvrtcGetProgramLog"): [P, ctypes.c_char_p],
            (n, "nvrtcGetPTXSize"): [P, ctypes.POINTER(S)],
            (n, "nvrtcGetPTX"): [P, ctypes.c_char_p],
            (n, "nvrtcGetCUBINSize"): [P, ctypes.POINTER(S)],
            (n, "nvrtcGetCUBIN"): [P, ctypes.c_char_p],
            (n, "nvrtcAddNameExpression"): [P, ctypes.c_char_p],
            (n, "nvrtcGetLoweredName"): [P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)],
            (n, "nvrtcGetNumSupportedArchs"): [ctypes.POINTER(I)],
            (n, "nvrtcGetSupportedArchs"): [ctypes.POINTER(I)],
            (c, "cuInit"): [ctypes.c_uint],
            (c, "cuDriverGetVersion"): [ctypes.POINTER(I)],
            (c, "cuGetErrorName"): [I, ctypes.POINTER(ctypes.c_char_p)],
            (c, "cuGetErrorString"): [I, ctypes.POINTER(ctypes.c_char_p)],
            (c, "cuCtxGetCurrent"): [ctypes.POINTER(P)],
            (c, "cuCtxSetCurrent"): [P],
            (c, "cuDeviceGet"): [ctypes.POINTER(I), I],
            (c, "cuDevicePrimaryCtxRetain"): [ctypes.POINTER(P), I],
            (c, "cuModuleLoadData"): [ctypes.POINTER(P), ctypes.c_void_p],
            (c, "cuModuleGetFunction"): [ctypes.POINTER(P), P, ctypes.c_char_p],
            (c, "cuFuncGetAttribute"): [ctypes.POINTER(I), I, P],
            (c, "cuFuncSetAttribute"): [P, I, I],
            (c, "cuLaunchKernel"): [P, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                    ctypes.c_uint, ctypes.c_uint, P, ctypes.POINTER(P), ctypes.POINTER(P)],
        }
        for (lib, name), argtypes in sigs.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                if name in ("nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcGetNumSupportedArchs",
                            "nvrtcGetSupportedArchs"):
                    setattr(self, name, None)  # NVRTC < 11.2: PTX only
                    continue
                raise NvrtcNotFound(f"{name} is missing from {lib._name} (too old?)") from None
            fn.argtypes = argtypes
            fn.restype = ctypes.c_char_p if name == "nvrtcGetErrorString" else ctypes.c_int
            setattr(self, name, fn)
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.nvrtc_version = (major.value, minor.value)
        drv = ctypes.c_int()
        self.cuInit(0)
        self.cuDriverGetVersion(ctypes.byref(drv))
        self.driver_version = (drv.value // 1000, drv.value % 1000 // 10)
        self.supported_archs: list[int] = []
        if self.nvrtcGetNumSupportedArchs is not None:
            count = ctypes.c_int()
            if self.nvrtcGetNumSupportedArchs(ctypes.byref(count)) == 0 and count.value > 0:
                arr = (ctypes.c_int * count.value)()
                self.nvrtcGetSupportedArchs(arr)
                self.supported_archs = list(arr)

    # --- helpers ---
    def nvrtc_error(self, code: int) -> str:
        s = self.nvrtcGetErrorString(code)
        return s.decode() if s else f"NVRTC error {code}"

    def cu_error(self, code: int) -> str:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.cuGetErrorName(code, ctypes.byref(name))
        self.cuGetErrorString(code, ctypes.byref(text))
        n = name.value.decode() if name.value else f"CUDA error {code}"
        t = text.value.decode() if text.value else ""
        hint = CU_ERRORS_HINTS.get(code)
        return f"{n}: {t}" + (f" — {hint}" if hint and hint not in t else "")

    def check_cu(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed: {self.cu_error(code)}")


_api: _Api | None = None
_api_error: str | None = None


def api() -> _Api:
    global _api, _api_error
    if _api is None:
        if _api_error:
            raise NvrtcNotFound(_api_error)
        try:
            _api = _Api()
        except NvrtcNotFound as e:
            _api_error = str(e)
            raise
    return _api


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
    from ._cuda_common import cuda_problem

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
    key = digest(source, " ".join(opts), kind, repr(a.nvrtc_version), repr(launchable),
                 repr(a.driver_version) if kind == "ptx" else "")
    start = time.perf_counter()

    def build(tmp: Path) -> None:
        image, lowered, log, code = _nvrtc_compile(a, source, opts, launchable, kind)
        if image is None:
            if code == 6:  # NVRTC_ERROR_COMPILATION
                raise compile_error_from_log(log, source, context.candidate_text)
            raise CompileError(f"NVRTC failed: {a.nvrtc_error(code)}", log=log)
        (tmp / f"kernel.{kind}").write_bytes(image)
        (tmp / "meta.json").write_text(json.dumps({"lowered": lowered, "log": log, "target": target}))

    directory, cached = cached_build("cuda", key, build)
    build_s = time.perf_counter() - start
    launches.record_build("cuda", key, cached, build_s)
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


# ---------------------------------------------------------------------------------------------------------------
# Launch

_FUNC_ATTRS = {"max_threads_per_block": 0, "shared_size_bytes": 1, "const_size_bytes": 2, "local_size_bytes": 3,
               "num_regs": 4}
_MAX_DYNAMIC_SHARED = 8


def _dim3(value, what: str, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3:
        raise TypeError(f"{what} must be an int or a tuple of 1-3 ints, got {value!r}")
    dims = []
    for v in value:
        if hasattr(v, "item") and not isinstance(v, int):
            v = v.item()
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{what} must hold Python ints, got {type(v).__name__} {v!r}")
        dims.append(v)
    dims += [1] * (3 - len(dims))
    for d, lim, axis in zip(dims, limits, "xyz"):
        if d < 1:
            raise ValueError(f"{what}.{axis} = {d}: every dimension must be at least 1 (an empty tensor? skip the "
                             f"launch when there is no work)")
        if d > lim:
            raise ValueError(f"{what}.{axis} = {d} exceeds the limit {lim}")
    return tuple(dims)


class CudaKernel:
    """One launchable `__global__` function: `kernel(grid=..., block=..., args=(...), shared_mem=0, stream=None)`."""

    def __init__(self, module: "CudaModule", sig: KSignature, func: ctypes.c_void_p):
        self._m, self.signature, self._func = module, sig, func
        self.name = sig.name
        self._dyn_shared_set = 48 * 1024
        dt = _torch_dtypes()
        self._conv = []
        for i, p in enumerate(sig.params):
            if p.pointer:
                allowed, align = dt[p.base]
                self._conv.append(("ptr", allowed, align))
            else:
                ctype, kind = _SCALARS[p.base]
                self._conv.append((kind, ctype, p.base))
        self.attributes = {}
        a = module._api
        for k, attr in _FUNC_ATTRS.items():
            v = ctypes.c_int()
            if a.cuFuncGetAttribute(ctypes.byref(v), attr, func) == 0:
                self.attributes[k] = v.value

    def __repr__(self) -> str:
        return f"<CUDA kernel {self.signature} {self.attributes}>"

    def _arg(self, i: int, p: KParam, conv, value, device_index: int):
        where = f"argument {i + 1} ({p.name}) of {self.name}"
        import torch

        if conv[0] == "ptr":
            if not isinstance(value, torch.Tensor):
                if value is None or (isinstance(value, int) and value == 0):
                    return ctypes.c_void_p(0)  # an explicit null pointer
                raise TypeError(f"{where} must be a CUDA tensor (the kernel parameter is {p.base}*), got "
                                f"{type(value).__name__}")
            if value.device.type != "cuda":
                raise TypeError(f"{where} is on {value.device}; the kernel needs a CUDA tensor (call .cuda())")
            if value.device.index != device_index:
                raise TypeError(f"{where} is on {value.device}, but the kernels were loaded on cuda:{device_index}")
            allowed, align = conv[1], conv[2]
            if allowed is not None and value.dtype not in allowed:
                raise TypeError(f"{where} has dtype {value.dtype}; the kernel parameter is {p.base}* (expects "
                                f"{' or '.join(str(d) for d in allowed)})")
            if not value.is_contiguous():
                raise TypeError(f"{where} is not contiguous (shape {list(value.shape)}, strides {value.stride()}); "
                                f"call .contiguous() first")
            ptr = value.data_ptr()
            if align > 1 and ptr % align:
                raise TypeError(f"{where}: {p.base}* needs {align}-byte alignment, but the tensor's data starts at an "
                                f"address that is {ptr % align} bytes off (a view with a storage offset?)")
            return ctypes.c_void_p(ptr)
        kind, ctype, base = conv
        if hasattr(value, "numel") and hasattr(value, "item"):
            if value.numel() != 1:
                raise TypeError(f"{where} is a scalar {base} in the kernel, got a tensor of shape {list(value.shape)}")
            value = value.item()
        if kind == "bool":
            return ctype(bool(value))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{where} must be a Python number for the kernel's {base}, got {type(value).__name__}")
        if kind == "float":
            return ctype(float(value))
        if kind == "half":
            return ctype(struct.unpack("<H", struct.pack("<e", float(value)))[0])
        if kind == "bf16":
            return ctype(int(torch.tensor(float(value), dtype=torch.bfloat16).view(torch.int16).item()) & 0xFFFF)
        if isinstance(value, float):
            if not value.is_integer():
                raise TypeError(f"{where} is an integer ({base}) in the kernel, got the float {value}")
            value = int(value)
        bits = ctypes.sizeof(ctype) * 8
        signed = ctype in (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64)
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not lo <= value <= hi:
            raise OverflowError(f"{where} = {value} does not fit the kernel's {base} ({lo}..{hi}); use int64_t")
        return ctype(value)

    def __call__(self, grid=None, block=None, args=(), shared_mem: int = 0, stream=None):
        sig = self.signature
        if grid is None or block is None:
            raise TypeError(f"{self.name}(grid=..., block=..., args=(...)) needs grid and block")
        if not isinstance(args, (tuple, list)):
            args = (args,)
        if len(args) != len(sig.params):
            raise TypeError(f"{self.name} takes {len(sig.params)} arguments ({sig}), got {len(args)}")
        m = self._m
        g = _dim3(grid, "grid", (2 ** 31 - 1, 65535, 65535))
        b = _dim3(block, "block", (1024, 1024, 64))
        threads = b[0] * b[1] * b[2]
        max_threads = self.attributes.get("max_threads_per_block", 1024)
        if threads > max_threads:
            raise ValueError(f"block {b} has {threads} threads; {self.name} allows at most {max_threads} per block "
                             f"(registers: {self.attributes.get('num_regs')} per thread)")
        if not isinstance(shared_mem, int) or shared_mem < 0:
            raise TypeError(f"shared_mem must be a non-negative int (bytes), got {shared_mem!r}")
        a = m._api
        if shared_mem > self._dyn_shared_set:
            limit = m.shared_optin - self.attributes.get("shared_size_bytes", 0)
            if shared_mem > limit:
                raise ValueError(f"shared_mem={shared_mem} bytes exceeds what {self.name} may use on this GPU "
                                 f"({limit} bytes of dynamic shared memory)")
            a.check_cu(a.cuFuncSetAttribute(self._func, _MAX_DYNAMIC_SHARED, shared_mem),
                       f"raising {self.name}'s dynamic shared memory limit")
            self._dyn_shared_set = shared_mem
        values = [self._arg(i, p, c, v, m.device_index) for i, (p, c, v) in
                  enumerate(zip(sig.params, self._conv, args))]
        params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        if stream is None:
            handle = m.current_stream()
        else:
            handle = getattr(stream, "cuda_stream", stream)
            if not isinstance(handle, int):
                raise TypeError(f"stream must be a torch.cuda.Stream, got {type(stream).__name__}")
        launches.record(self.name)
        code = a.cuLaunchKernel(self._func, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem, ctypes.c_void_p(handle),
                                params, None)
        if code != 0:
            raise RuntimeError(f"launching {self.name}(grid={g}, block={b}, shared_mem={shared_mem}) failed: "
                               f"{a.cu_error(code)}")


class CudaModule:
    """Attribute access gives the source's `__global__` kernels; `info()` gives registers and memory per kernel."""

    def __init__(self, a: _Api, module, kernels: dict[str, KSignature], lowered: dict[str, str], device_index: int,
                 target: str, cached: bool, build_s: float, log: str, path: str):
        import torch

        self._api, self._module, self._signatures = a, module, kernels
        self._lowered, self.device_index, self.target = lowered, device_index, target
        self.cached, self.build_s, self.log, self.path = cached, build_s, log, path
        props = torch.cuda.get_device_properties(device_index)
        self.shared_optin = int(getattr(props, "shared_memory_per_block_optin", 48 * 1024))
        self._kernels: dict[str, CudaKernel] = {}
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.current_stream = (lambda: raw(device_index)) if raw else (
            lambda: torch.cuda.current_stream(device_index).cuda_stream)
        for name, sig in kernels.items():
            if sig.error:
                continue
            func = ctypes.c_void_p()
            code = a.cuModuleGetFunction(ctypes.byref(func), module, lowered.get(name, name).encode())
            if code != 0:
                raise CompileError(f"kernel {name} is not in the compiled module: {a.cu_error(code)}")
            self._kernels[name] = CudaKernel(self, sig, func)

    def __getattr__(self, name: str) -> CudaKernel:
        d = self.__dict__
        if name in d.get("_kernels", {}):
            return d["_kernels"][name]
        sig = d.get("_signatures", {}).get(name)
        if sig is not None and sig.error:
            raise AttributeError(sig.error)
        known = ", ".join(sorted(d.get("_kernels", {}))) or "none"
        raise AttributeError(f"the compiled module has no __global__ kernel {name!r} (found: {known})")

    def __dir__(self):
        return sorted(self._kernels)

    def info(self) -> dict:
        return {"target": self.target, "cached": self.cached, "build_s": self.build_s,
                "kernels": {k: dict(v.attributes) for k, v in self._kernels.items()}}
