"""Call `extern "C"` functions of a compiled shared library on torch tensors, through ctypes.

The C signatures are read from the source, so a call passes tensors and Python numbers directly and gets a clear
error for a wrong dtype, a non-contiguous or non-CPU tensor, or a wrong argument count — instead of a segfault.
Every call is counted (`kforge_core.eval.harness.launches`) and, while a profile is being taken, shows up in
torch.profiler as `kforge::<function>`.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from time import perf_counter_ns as _clock  # bound at import, before any candidate code

import torch

from kforge_core.eval.harness import launches

_POINTER_DTYPES = {
    "float": (torch.float32,), "double": (torch.float64,), "int": (torch.int32,), "int32_t": (torch.int32,),
    "unsigned": (torch.int32,), "uint32_t": (torch.int32, torch.uint32), "long": (torch.int64,),
    "int64_t": (torch.int64,), "long long": (torch.int64,), "uint64_t": (torch.int64, torch.uint64),
    "short": (torch.int16,), "int16_t": (torch.int16,), "uint16_t": (torch.float16, torch.bfloat16, torch.int16),
    "int8_t": (torch.int8,), "char": (torch.int8, torch.uint8, torch.bool), "signed char": (torch.int8,),
    "unsigned char": (torch.uint8, torch.bool), "uint8_t": (torch.uint8, torch.bool), "bool": (torch.bool,),
    "void": None,  # any dtype
}
_SCALARS = {
    "float": ctypes.c_float, "double": ctypes.c_double, "int": ctypes.c_int32, "int32_t": ctypes.c_int32,
    "unsigned": ctypes.c_uint32, "uint32_t": ctypes.c_uint32, "long": ctypes.c_int64, "int64_t": ctypes.c_int64,
    "long long": ctypes.c_int64, "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t, "bool": ctypes.c_bool,
    "short": ctypes.c_int16, "int16_t": ctypes.c_int16, "int8_t": ctypes.c_int8, "char": ctypes.c_char,
    "ptrdiff_t": ctypes.c_ssize_t,
}
_QUALIFIERS = re.compile(r"\b(const|volatile|restrict|__restrict__|__restrict|struct|signed(?= char))\b")
_FUNC = re.compile(r"(?P<ret>[A-Za-z_][\w\s\*]*?)\s*\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)\s*(?:\{|;)")


class SignatureError(ValueError):
    pass


@dataclass(frozen=True)
class Param:
    name: str
    base: str
    pointer: bool


@dataclass(frozen=True)
class Signature:
    name: str
    ret: str
    params: tuple[Param, ...]

    def __str__(self) -> str:
        args = ", ".join(f"{p.base}{'*' if p.pointer else ''} {p.name}" for p in self.params)
        return f"{self.ret} {self.name}({args})"


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def _block(src: str, open_brace: int) -> str:
    depth = 0
    for i in range(open_brace, len(src)):
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return src[open_brace + 1:i]
    return src[open_brace + 1:]


def _top_level(src: str) -> str:
    """Drop function bodies so only declarations at depth 0 remain."""
    out, depth = [], 0
    for ch in src:
        if ch == "{":
            if depth == 0:
                out.append("{")
            depth += 1
        elif ch == "}":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _parse_param(text: str, index: int) -> Param:
    text = _QUALIFIERS.sub(" ", text).strip()
    pointer = "*" in text
    if text.count("*") > 1:
        raise SignatureError(f"parameter {text!r}: pointers to pointers cannot be passed from Python")
    text = text.replace("*", " ").replace("&", " ")
    words = text.split()
    if not words:
        raise SignatureError("empty parameter")
    base_words = words[:-1] if len(words) > 1 else words
    name = words[-1] if len(words) > 1 else f"arg{index}"
    base = " ".join(base_words).replace("std::", "").replace("unsigned int", "unsigned")
    table = _POINTER_DTYPES if pointer else _SCALARS
    if base not in table:
        raise SignatureError(f"parameter {' '.join(words)!r}: type {base!r} is not supported from Python "
                             f"(use float/double/int32_t/int64_t/uint8_t/bool/uint16_t and pointers to them)")
    return Param(name, base, pointer)


def parse_signatures(source: str) -> dict[str, Signature]:
    src = _strip_comments(source)
    regions = []
    for m in re.finditer(r'extern\s+"C"\s*', src):
        rest = src[m.end():]
        if rest.startswith("{"):
            regions.append(_top_level(_block(src, m.end())))
        else:
            end = rest.find("{")
            semi = rest.find(";")
            stop = min(x for x in (end, semi) if x >= 0) + 1 if max(end, semi) >= 0 else len(rest)
            regions.append(rest[:stop])
    sigs: dict[str, Signature] = {}
    for region in regions:
        for m in _FUNC.finditer(region):
            ret = _QUALIFIERS.sub(" ", m.group("ret")).split()
            ret_type = " ".join(w for w in ret if w not in ("static", "inline", "extern")) or "void"
            params_text = m.group("params").strip()
            params = () if params_text in ("", "void") else tuple(
                _parse_param(p, i) for i, p in enumerate(params_text.split(",")))
            sigs[m.group("name")] = Signature(m.group("name"), ret_type, params)
    return sigs


profiling_active = [False]  # flipped by the platform's profiler adapter; record_function costs µs per call


class KernelFunction:
    def __init__(self, cfunc, sig: Signature):
        self._cfunc = cfunc
        self.signature = sig
        cfunc.argtypes = [ctypes.c_void_p if p.pointer else _SCALARS[p.base] for p in sig.params]
        cfunc.restype = None if sig.ret == "void" else _SCALARS.get(sig.ret.replace("*", "").strip(), ctypes.c_int64)

    def _convert(self, i: int, p: Param, value):
        where = f"argument {i + 1} ({p.name}) of {self.signature.name}"
        if p.pointer:
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"{where} must be a tensor (the C parameter is {p.base}*), got {type(value).__name__}")
            if value.device.type != "cpu":
                raise TypeError(f"{where} is on {value.device}, the CPU kernel needs a CPU tensor")
            if not value.is_contiguous():
                raise TypeError(f"{where} is not contiguous; call .contiguous() first")
            allowed = _POINTER_DTYPES[p.base]
            if allowed is not None and value.dtype not in allowed:
                raise TypeError(f"{where} has dtype {value.dtype}, the C parameter is {p.base}* "
                                f"(expects {', '.join(str(d) for d in allowed)})")
            launches.touch(value)
            return value.data_ptr()
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise TypeError(f"{where} is a scalar {p.base} in C, got a tensor of shape {list(value.shape)}")
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if not (p.base == "bool" and isinstance(value, bool)):
                raise TypeError(f"{where} must be a Python number for C type {p.base}, got {type(value).__name__}")
        if p.base in ("float", "double"):
            return float(value)
        if isinstance(value, float):
            raise TypeError(f"{where} is an integer ({p.base}) in C, got the float {value}")
        return value

    def __call__(self, *args):
        sig = self.signature
        if len(args) != len(sig.params):
            raise TypeError(f"{sig.name} takes {len(sig.params)} arguments ({sig}), got {len(args)}")
        converted = [self._convert(i, p, a) for i, (p, a) in enumerate(zip(sig.params, args))]
        launches.record(sig.name)
        start = _clock()
        try:
            if profiling_active[0]:
                with torch.profiler.record_function(f"kforge::{sig.name}"):
                    return self._cfunc(*converted)
            return self._cfunc(*converted)
        finally:
            launches.add_kernel_time(_clock() - start)


class KernelLibrary:
    """Attribute access gives the library's `extern "C"` functions as callables on tensors."""

    def __init__(self, cdll, signatures: dict[str, Signature], path: str, cached: bool, build_s: float):
        self.path, self.cached, self.build_s = path, cached, build_s
        self._functions = {name: KernelFunction(getattr(cdll, name), sig) for name, sig in signatures.items()}

    def __getattr__(self, name: str):
        try:
            return self.__dict__["_functions"][name]
        except KeyError:
            known = ", ".join(sorted(self.__dict__.get("_functions", {}))) or "none"
            raise AttributeError(f"the compiled library has no extern \"C\" function {name!r} (found: {known})") \
                from None

    def __dir__(self):
        return sorted(self._functions)
