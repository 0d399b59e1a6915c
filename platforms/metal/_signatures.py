"""Read the kernel signatures of Metal Shading Language source, and bind Python call arguments to them.

`torch.mps.compile_shader` binds the i-th positional argument of a kernel call to `[[buffer(i)]]`: a tensor as a
buffer (at its storage offset), a Python float as a 32-bit `float`, a Python int as a 64-bit integer, a list of
numbers as a small constant array; `arg_casts={i: "int32" | "int16" | "int8" | "uint8" | "fp16" | "bf16"}` narrows
a scalar. It checks none of this against the kernel: a CPU tensor is bound as if it were a Metal buffer, a float32
tensor passed for `device half*` is read as halves, and a Python int for `constant uint&` is read as the low word of
an int64. This module parses the `kernel` declarations so each call can be checked (device, contiguity, dtype,
argument count) and scalars narrowed to the declared type automatically — clear errors instead of garbage or a
crash. It is pure Python (no Metal needed), so it is tested on any machine.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
from dataclasses import dataclass, field

import torch

from kforge_core.eval.native_scan import strip_c_comments

# Attributes that make a kernel parameter a built-in value (not bound from Python).
BUILTIN_ATTRIBUTES = frozenset({
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threads_per_threadgroup", "threadgroups_per_grid", "threads_per_grid", "thread_index_in_threadgroup",
    "thread_index_in_simdgroup", "thread_index_in_quadgroup", "simdgroup_index_in_threadgroup",
    "quadgroup_index_in_threadgroup", "simdgroups_per_threadgroup", "quadgroups_per_threadgroup",
    "threads_per_simdgroup", "thread_execution_width", "dispatch_threads_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup", "dispatch_quadgroups_per_threadgroup", "grid_origin", "grid_size",
})
ADDRESS_SPACES = ("device", "constant", "threadgroup", "threadgroup_imageblock", "thread", "object_data",
                  "ray_data")
_QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "__restrict__", "metal", "struct"}

# Scalar element types -> tensor dtypes a buffer of that type may hold.
ELEMENT_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "float": (torch.float32,), "half": (torch.float16,), "bfloat": (torch.bfloat16,),
    "int": (torch.int32,), "int32_t": (torch.int32,), "uint": (torch.int32, torch.uint32),
    "uint32_t": (torch.int32, torch.uint32), "unsigned int": (torch.int32, torch.uint32),
    "unsigned": (torch.int32, torch.uint32),
    "short": (torch.int16,), "int16_t": (torch.int16,), "ushort": (torch.int16, torch.uint16),
    "uint16_t": (torch.int16, torch.uint16), "unsigned short": (torch.int16, torch.uint16),
    "char": (torch.int8,), "int8_t": (torch.int8,), "signed char": (torch.int8,),
    "uchar": (torch.uint8, torch.bool), "uint8_t": (torch.uint8, torch.bool),
    "unsigned char": (torch.uint8, torch.bool),
    "bool": (torch.bool, torch.uint8),
    "long": (torch.int64,), "int64_t": (torch.int64,), "ulong": (torch.int64, torch.uint64),
    "uint64_t": (torch.int64, torch.uint64), "unsigned long": (torch.int64, torch.uint64),
    "size_t": (torch.int64, torch.uint64), "ptrdiff_t": (torch.int64,),
    "atomic_int": (torch.int32,), "atomic_uint": (torch.int32, torch.uint32), "atomic_float": (torch.float32,),
    "atomic_bool": (torch.bool,), "atomic_ulong": (torch.int64, torch.uint64),
}
# How a Python scalar reaches a scalar parameter of this type: (kind, arg_casts value or None, integer range).
_SCALAR_CASTS: dict[str, tuple[str, str | None, tuple[int, int] | None]] = {
    "float": ("float", None, None), "half": ("float", "fp16", None), "bfloat": ("float", "bf16", None),
    "int": ("int", "int32", (-2**31, 2**31 - 1)), "int32_t": ("int", "int32", (-2**31, 2**31 - 1)),
    "uint": ("int", "int32", (0, 2**32 - 1)), "uint32_t": ("int", "int32", (0, 2**32 - 1)),
    "unsigned int": ("int", "int32", (0, 2**32 - 1)), "unsigned": ("int", "int32", (0, 2**32 - 1)),
    "short": ("int", "int16", (-2**15, 2**15 - 1)), "int16_t": ("int", "int16", (-2**15, 2**15 - 1)),
    "ushort": ("int", "int16", (0, 2**16 - 1)), "uint16_t": ("int", "int16", (0, 2**16 - 1)),
    "unsigned short": ("int", "int16", (0, 2**16 - 1)),
    "char": ("int", "int8", (-128, 127)), "int8_t": ("int", "int8", (-128, 127)),
    "signed char": ("int", "int8", (-128, 127)),
    "uchar": ("int", "uint8", (0, 255)), "uint8_t": ("int", "uint8", (0, 255)),
    "unsigned char": ("int", "uint8", (0, 255)), "bool": ("int", "uint8", (0, 1)),
    "long": ("int", None, (-2**63, 2**63 - 1)), "int64_t": ("int", None, (-2**63, 2**63 - 1)),
    "ptrdiff_t": ("int", None, (-2**63, 2**63 - 1)), "ulong": ("int", None, (0, 2**64 - 1)),
    "uint64_t": ("int", None, (0, 2**64 - 1)), "unsigned long": ("int", None, (0, 2**64 - 1)),
    "size_t": ("int", None, (0, 2**64 - 1)),
}
_CAST_BITS = {"int32": 32, "int16": 16, "int8": 8}  # signed casts: unsigned values are passed as their bit pattern
_SET_BYTES_LIMIT = 4096  # Metal's setBytes limit: larger constant data must be a tensor
_VECTOR = re.compile(r"^(packed_)?(float|half|bfloat|int|uint|short|ushort|char|uchar|long|ulong|bool)([234])$")


class MetalSignatureError(ValueError):
    """The source declares a kernel parameter that cannot be bound from Python; `kernel_line` is 1-based."""

    def __init__(self, message: str, kernel_line: int | None = None):
        self.kernel_line = kernel_line
        super().__init__(message)


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # element / value type as written, qualifiers removed ("float", "float4", "Params")
    address_space: str | None  # "device", "constant", ... or None (by value)
    indirection: str  # "*", "&" or ""
    attributes: tuple[str, ...]
    kind: str  # "buffer" (bound from Python) | "builtin" | "threadgroup" | "resource"
    buffer_index: int | None = None

    @functools.cached_property
    def element(self) -> tuple[str, int, int]:
        """(scalar type, vector width, elements per vector in memory) — ("float", 4, 4), ("float", 3, 4)."""
        m = _VECTOR.match(self.type)
        if not m:
            return self.type, 1, 1
        width = int(m.group(3))
        stride = width if (m.group(1) or width != 3) else 4  # a non-packed 3-vector occupies 4 elements
        return m.group(2), width, stride

    def describe(self) -> str:
        space = f"{self.address_space} " if self.address_space else ""
        return f"{space}{self.type}{self.indirection} {self.name}"


@dataclass(frozen=True)
class KernelSignature:
    name: str  # the name the library exposes (host_name for template instantiations)
    params: tuple[Param, ...]
    line: int  # 1-based line of the declaration in the kernel source
    buffers: dict[int, Param] = field(default_factory=dict)  # buffer index -> parameter

    @property
    def n_args(self) -> int:
        return max(self.buffers) + 1 if self.buffers else 0

    @functools.cached_property
    def grid_dims(self) -> int | None:
        """1, 2 or 3 when the kernel reads thread_position_in_grid; None when it does not."""
        for p in self.params:
            if "thread_position_in_grid" in p.attributes:
                m = re.search(r"([234])$", p.type)
                return int(m.group(1)) if m else 1
        return None

    def __str__(self) -> str:
        return f"kernel void {self.name}({', '.join(p.describe() for p in self.params)})"


# ---------------------------------------------------------------------------------------------------------------
# Parsing

def _split_top_level(text: str, sep: str = ",") -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([<{":
            depth += 1
        elif ch in ")]>}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def _matching_paren(src: str, open_pos: int) -> int:
    depth = 0
    for i in range(open_pos, len(src)):
        if src[i] == "(":
            depth += 1
        elif src[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _parse_param(text: str, line: int) -> Param:
    attributes = tuple(a.strip() for block in re.findall(r"\[\[(.*?)\]\]", text, flags=re.S)
                       for a in _split_top_level(block))
    body = re.sub(r"\[\[.*?\]\]", " ", text, flags=re.S)
    body = re.sub(r"=.*$", "", body, flags=re.S)  # default values are not allowed on kernels anyway
    indirection = "*" if "*" in body else ("&" if "&" in body else "")
    body = body.replace("*", " ").replace("&", " ")
    body = re.sub(r"\bmetal::", "", body)
    words = body.split()
    if not words:
        raise MetalSignatureError("empty kernel parameter", line)
    space = next((w for w in words if w in ADDRESS_SPACES), None)
    name = words[-1] if len(words) > 1 else "arg"
    type_words = [w for w in words[:-1] if w not in ADDRESS_SPACES and w not in _QUALIFIERS]
    ptype = " ".join(type_words) if type_words else words[0]
    ptype = re.sub(r"^atomic<\s*(\w+)\s*>$", r"atomic_\1", ptype.replace(" <", "<"))
    attr_names = {re.sub(r"\(.*$", "", a).strip() for a in attributes}
    buffer_index = None
    for a in attributes:
        m = re.fullmatch(r"buffer\s*\(\s*(\d+)\s*\)", a)
        if m:
            buffer_index = int(m.group(1))
    if attr_names & BUILTIN_ATTRIBUTES:
        kind = "builtin"
    elif space == "threadgroup" or "threadgroup" in attr_names:
        kind = "threadgroup"
    elif re.match(r"(texture|depth|sampler|array<|visible_function_table|intersection_function_table|"
                  r"acceleration_structure|imageblock)", ptype) or attr_names & {"texture", "sampler", "stage_in"}:
        kind = "resource"
    else:
        kind = "buffer"
    return Param(name, ptype, space, indirection, attributes, kind, buffer_index)


_KERNEL = re.compile(r"(?:\bkernel\b|\[\[\s*kernel\b[^\]]*\]\])(?:\s*\[\[[^\]]*\]\])*\s+void\s+"
                     r"(?P<name>[A-Za-z_]\w*)\s*(?P<targs><[^()]*?>)?\s*\(")


def parse_kernels(source: str) -> dict[str, KernelSignature]:
    """Every callable kernel of `source`: plain `kernel void f(...)` definitions and template instantiations with
    `[[host_name("f_float")]]`. Generic template definitions are skipped (only their instantiations are callable).
    Raises MetalSignatureError for parameters torch cannot bind (threadgroup memory, textures)."""
    src = strip_c_comments(source)
    kernels: dict[str, KernelSignature] = {}
    for m in _KERNEL.finditer(src):
        # The declaration starts after the previous statement or block.
        decl_start = max(src.rfind(";", 0, m.start()), src.rfind("}", 0, m.start()), src.rfind("{", 0, m.start()))
        prefix = src[decl_start + 1:m.start()]
        host = re.search(r"host_name\s*\(\s*\"([^\"]+)\"\s*\)", prefix + m.group(0))
        if re.search(r"\btemplate\s*<", prefix) and not host:
            continue  # a generic template: not callable until instantiated
        close = _matching_paren(src, m.end() - 1)
        if close < 0:
            continue  # unbalanced: the compiler will report it
        line = src.count("\n", 0, m.start("name")) + 1
        params_text = src[m.end():close]
        params = tuple(_parse_param(p, line) for p in _split_top_level(params_text) if p.strip())
        name = host.group(1) if host else m.group("name")
        for p in params:
            if p.kind == "threadgroup":
                raise MetalSignatureError(
                    f"kernel {name}: parameter `{p.describe()}` is threadgroup memory, which "
                    f"torch.mps.compile_shader cannot size from Python; declare it inside the kernel body instead, "
                    f"e.g. `threadgroup float tile[256];`", line)
            if p.kind == "resource":
                raise MetalSignatureError(
                    f"kernel {name}: parameter `{p.describe()}` is a texture/sampler/stage_in resource; "
                    f"torch.mps.compile_shader binds only buffers (tensors) and scalars", line)
        bound = [p for p in params if p.kind == "buffer"]
        explicit = [p for p in bound if p.buffer_index is not None]
        if explicit and len(explicit) != len(bound):
            raise MetalSignatureError(
                f"kernel {name}: give every buffer parameter a [[buffer(i)]] index, or none (then they are "
                f"numbered in order): call argument i binds to [[buffer(i)]]", line)
        buffers: dict[int, Param] = {}
        numbered = []
        for p in params:
            if p.kind == "buffer":
                index = p.buffer_index if p.buffer_index is not None else len(buffers)
                if index in buffers:
                    raise MetalSignatureError(f"kernel {name}: two parameters use [[buffer({index})]]", line)
                p = Param(p.name, p.type, p.address_space, p.indirection, p.attributes, p.kind, index)
                buffers[index] = p
            numbered.append(p)
        kernels[name] = KernelSignature(name, tuple(numbered), line, dict(sorted(buffers.items())))
    return kernels


# ---------------------------------------------------------------------------------------------------------------
# Binding call arguments

@dataclass
class Bound:
    args: list  # what to pass to the native kernel, positionally
    casts: dict[int, str]  # arg_casts for the native call


def _is_number(v) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, torch.Tensor) and not isinstance(v, complex)


def _scalar(where: str, value, elem: str | None) -> tuple[object, str | None]:
    """Convert one Python number for a scalar of Metal type `elem` (None: unknown, passed as torch would)."""
    if type(value) is int or type(value) is float:
        pass
    elif isinstance(value, bool):
        value = int(value)
    elif isinstance(value, numbers.Integral):
        value = int(value)
    elif isinstance(value, numbers.Real):
        value = float(value)
    else:
        raise TypeError(f"{where} must be a Python number, got {type(value).__name__}")
    if elem is None or elem not in _SCALAR_CASTS:
        return value, None
    kind, cast, bounds = _SCALAR_CASTS[elem]
    if kind == "float":
        return float(value), cast
    if isinstance(value, float):
        if not value.is_integer():
            raise TypeError(f"{where} is an integer ({elem}) in the kernel, got the float {value}")
        value = int(value)
    lo, hi = bounds
    if not lo <= value <= hi:
        raise ValueError(f"{where} is {elem} in the kernel; {value} is out of its range [{lo}, {hi}]")
    if cast in _CAST_BITS and value >= 2 ** (_CAST_BITS[cast] - 1):
        value -= 2 ** _CAST_BITS[cast]  # same bits as the unsigned value after the signed cast
    if cast is None and value >= 2**63:
        value -= 2**64
    return value, cast


def _check_tensor(where: str, t: torch.Tensor, p: Param | None, device_type: str) -> None:
    if t.device.type != device_type:
        hint = " (for a scalar, pass a Python number)" if t.numel() == 1 else ""
        raise TypeError(f"{where} is a tensor on {t.device}; Metal kernels read MPS tensors only: move it with "
                        f".to('mps'){hint}")
    if not t.is_contiguous():
        raise TypeError(f"{where} is not contiguous: the kernel gets the raw buffer at the tensor's storage "
                        f"offset, so a strided view would be read as dense; call .contiguous() first")
    if p is None:
        return
    elem, width, stride = p.element
    allowed = ELEMENT_DTYPES.get(elem)
    if allowed is not None and t.dtype not in allowed:
        raise TypeError(f"{where} has dtype {t.dtype}, but the kernel declares `{p.describe()}` "
                        f"(expects {', '.join(str(d) for d in allowed)})")
    if stride > 1:
        if t.numel() % stride:
            raise ValueError(f"{where} has {t.numel()} elements, not a multiple of {stride} for `{p.describe()}`")
        if (t.storage_offset() % stride) != 0:
            raise ValueError(f"{where} starts at storage offset {t.storage_offset()}, not aligned for "
                             f"`{p.describe()}`; call .contiguous() on a fresh tensor")


def bind_arguments(sig: KernelSignature | None, kernel_name: str, args: tuple, device_type: str = "mps",
                   casts_supported: bool = True) -> Bound:
    """Check `args` against the kernel's declaration and compute arg_casts. Raises TypeError/ValueError with
    the argument's position and name. With `sig=None` (a kernel this parser could not read) only the generic checks
    run: tensors must be on the device and contiguous."""
    if sig is not None and len(args) != sig.n_args:
        declared = ", ".join(f"[[buffer({i})]] {p.describe()}" for i, p in sig.buffers.items()) or "none"
        raise TypeError(f"{kernel_name} takes {sig.n_args} arguments (one per buffer parameter, in buffer-index "
                        f"order: {declared}), got {len(args)}")
    out, casts = [], {}
    for i, value in enumerate(args):
        p = sig.buffers.get(i) if sig is not None else None
        where = f"argument {i + 1} ({p.name})" if p else f"argument {i + 1}"
        where = f"{where} of {kernel_name}"
        if sig is not None and p is None:
            raise TypeError(f"{where} binds to [[buffer({i})]], which the kernel does not declare")
        if isinstance(value, torch.Tensor):
            if p is not None and not p.indirection and p.address_space is None:
                raise TypeError(f"{where} is a tensor, but the kernel declares `{p.describe()}` by value; "
                                f"pass a Python number")
            _check_tensor(where, value, p, device_type)
            out.append(value)
            continue
        if isinstance(value, (list, tuple)):
            if not value:
                raise ValueError(f"{where} is an empty list; Metal cannot bind an empty array")
            if all(isinstance(v, torch.Tensor) for v in value):
                for j, t in enumerate(value):
                    _check_tensor(f"{where}[{j}]", t, None, device_type)
                out.append(list(value))
                continue
            if p is not None and p.address_space == "device":
                raise TypeError(f"{where} is a Python list, but `{p.describe()}` is device memory: pass a tensor")
            elem = p.element[0] if p is not None else None
            conv = [_scalar(f"{where}[{j}]", v, elem) for j, v in enumerate(value)]
            kinds = {type(v) for v, _ in conv}
            if len(kinds) > 1:
                raise TypeError(f"{where} mixes ints and floats; make every element the same type")
            cast = conv[0][1]
            item = {None: 8 if kinds == {int} else 4, "fp16": 2, "bf16": 2, "int32": 4, "int16": 2, "int8": 1,
                    "uint8": 1}[cast]
            if len(value) * item > _SET_BYTES_LIMIT:
                raise ValueError(f"{where} is {len(value) * item} bytes of constant data; Metal passes at most "
                                 f"{_SET_BYTES_LIMIT} bytes inline: pass a tensor instead")
            out.append([v for v, _ in conv])
            if cast:
                casts[i] = cast
            continue
        if type(value) in (int, float) or _is_number(value):
            if p is not None and p.address_space == "device":
                raise TypeError(f"{where} is a Python number, but the kernel declares `{p.describe()}` (device "
                                f"memory): pass a tensor, or declare it `constant {p.type}& {p.name}`")
            elem = p.element[0] if p is not None else None
            if p is not None and p.element[1] > 1:
                raise TypeError(f"{where}: `{p.describe()}` is a vector; pass a list of {p.element[1]} numbers")
            v, cast = _scalar(where, value, elem)
            out.append(v)
            if cast:
                casts[i] = cast
            continue
        raise TypeError(f"{where} must be an MPS tensor, a Python number or a list of numbers, "
                        f"got {type(value).__name__}")
    if casts and not casts_supported:
        names = ", ".join(f"argument {i + 1}" for i in casts)
        raise TypeError(f"{kernel_name}: {names} need a narrowing cast (arg_casts), which this torch version's "
                        f"compile_shader does not support; declare integer scalars as `constant long&` and float "
                        f"scalars as `constant float&` (Python ints arrive as 64-bit, floats as 32-bit)")
    return Bound(out, casts)


def normalize_dispatch(kernel_name: str, threads, group_size, max_threads: int | None = None,
                       grid_dims: int | None = None) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """threads= (total threads per dimension, 1 to 3 dims) and group_size= (threads per threadgroup, same dims)."""
    if threads is None:
        raise TypeError(f"{kernel_name}: pass threads= (the total number of threads per dimension, e.g. "
                        f"threads=out.numel() or threads=(cols, rows)); torch's default (numel of the first tensor "
                        f"argument) is too easy to get wrong")

    def as_dims(value, what: str) -> tuple[int, ...]:
        if type(value) is tuple and 0 < len(value) < 4 and all(type(d) is int and d > 0 for d in value):
            return value  # the common case, checked fast
        dims = (value,) if isinstance(value, numbers.Integral) else tuple(value)
        if not 1 <= len(dims) <= 3:
            raise ValueError(f"{kernel_name}: {what} must have 1 to 3 dimensions, got {len(dims)}")
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, numbers.Integral) or int(d) < 1:
                raise ValueError(f"{kernel_name}: {what} must be positive integers, got {value!r}")
        return tuple(int(d) for d in dims)

    t = as_dims(threads, "threads")
    g = None
    if group_size is not None:
        g = as_dims(group_size, "group_size")
        if len(g) != len(t):
            raise ValueError(f"{kernel_name}: group_size {g} must have as many dimensions as threads {t}")
        if max_threads and math.prod(g) > max_threads:
            raise ValueError(f"{kernel_name}: group_size {g} has {math.prod(g)} threads per threadgroup; this "
                             f"kernel allows at most {max_threads} (kernel.max_threads_per_threadgroup)")
    if grid_dims == 1 and any(d > 1 for d in t[1:]):
        raise ValueError(f"{kernel_name} reads thread_position_in_grid as a scalar, so it sees only the x "
                         f"coordinate of the {len(t)}-D grid threads={t}; declare uint{len(t)} or launch 1-D")
    return t, g
