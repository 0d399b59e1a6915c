"""Kernel signatures: the `__global__` functions of a CUDA C++ source and their parameters, read without compiling.

`parse_kernels` finds every `__global__ void` function and parses its parameters into C base types (pointer or by
value), or says why it cannot be launched from Python (templates, overloads, references, unsupported types). The
tables here say which torch dtypes and alignment each pointer type accepts and which ctypes type passes each scalar;
`platforms.cuda._launch` checks launch arguments against them.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

from kforge_core.eval.native_scan import strip_c_comments


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
    src = strip_c_comments(source)
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
