"""Launch checks: compiled kernels as Python callables that check every argument against the C signature, then launch.

`CudaModule` wraps a loaded CUDA module (one `CudaKernel` per launchable `__global__` function, by attribute);
`CudaKernel(grid=..., block=..., args=(...), shared_mem=0, stream=None)` checks grid/block dimensions against the
device and the kernel's limits, dynamic shared memory, and each argument (CUDA tensor on the right device, dtype vs
pointer type, contiguity, alignment, integer range), counts the launch and calls `cuLaunchKernel` on torch's stream.
"""

from __future__ import annotations

import ctypes
import struct
import threading

from kforge_core.errors import CompileError
from kforge_core.eval.harness import launches

from ._binding import _Api
from ._signatures import _SCALARS, KSignature, _torch_dtypes

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
        if type(v) is not int:  # the common case skips the conversions below
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
    """One launchable `__global__` function: `kernel(grid=..., block=..., args=(...), shared_mem=0, stream=None)`.

    Host cost matters: a forward call pays it on every launch, and the evaluator times calls one at a time from a
    synchronized, idle start, where each microsecond of Python costs several. So the parameter holders and the
    kernelParams array pointing at them are made once; a launch checks each argument, stores its value in the
    holder (cuLaunchKernel copies the values) and launches, under a lock so two threads cannot mix their values.
    """

    def __init__(self, module: "CudaModule", sig: KSignature, func: ctypes.c_void_p):
        import torch

        self._m, self.signature, self._func = module, sig, func
        self.name = sig.name
        self._dyn_shared_set = 48 * 1024
        self._tensor = torch.Tensor
        dt = _torch_dtypes()
        self._conv, self._holders = [], []
        for p in sig.params:
            if p.pointer:
                allowed, align = dt[p.base]
                self._conv.append(("ptr", allowed, align))
                self._holders.append(ctypes.c_void_p())
            else:
                ctype, kind = _SCALARS[p.base]
                bits = ctypes.sizeof(ctype) * 8
                signed = ctype in (ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64)
                bounds = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
                self._conv.append((kind, p.base, bounds))
                self._holders.append(ctype())
        self._params = (ctypes.c_void_p * max(1, len(self._holders)))(*[ctypes.addressof(h) for h in self._holders])
        self._lock = threading.Lock()
        self.attributes = {}
        a = module._api
        for k, attr in _FUNC_ATTRS.items():
            v = ctypes.c_int()
            if a.cuFuncGetAttribute(ctypes.byref(v), attr, func) == 0:
                self.attributes[k] = v.value

    def __repr__(self) -> str:
        return f"<CUDA kernel {self.signature} {self.attributes}>"

    def _where(self, i: int) -> str:
        return f"argument {i + 1} ({self.signature.params[i].name}) of {self.name}"

    def _pointer(self, i: int, conv, value, device_index: int) -> int:
        """The address to store in pointer parameter i's holder, after checking the tensor against the C type."""
        p = self.signature.params[i]
        if not isinstance(value, self._tensor):
            if value is None or (isinstance(value, int) and value == 0):
                return 0  # an explicit null pointer
            raise TypeError(f"{self._where(i)} must be a CUDA tensor (the kernel parameter is {p.base}*), got "
                            f"{type(value).__name__}")
        if not value.is_cuda:
            raise TypeError(f"{self._where(i)} is on {value.device}; the kernel needs a CUDA tensor (call .cuda())")
        if value.get_device() != device_index:
            raise TypeError(f"{self._where(i)} is on {value.device}, but the kernels were loaded on "
                            f"cuda:{device_index}")
        allowed, align = conv[1], conv[2]
        if allowed is not None and value.dtype not in allowed:
            raise TypeError(f"{self._where(i)} has dtype {value.dtype}; the kernel parameter is {p.base}* "
                            f"(expects {' or '.join(str(d) for d in allowed)})")
        if not value.is_contiguous():
            raise TypeError(f"{self._where(i)} is not contiguous (shape {list(value.shape)}, strides "
                            f"{value.stride()}); call .contiguous() first")
        ptr = value.data_ptr()
        if align > 1 and ptr % align:
            raise TypeError(f"{self._where(i)}: {p.base}* needs {align}-byte alignment, but the tensor's data "
                            f"starts at an address that is {ptr % align} bytes off (a view with a storage offset?)")
        return ptr

    def _scalar(self, i: int, conv, value):
        """The value to store in scalar parameter i's holder, after checking it against the C type."""
        kind, base, (lo, hi) = conv
        # a Python int (the common case) skips the hasattr probes, which raise and catch inside for an int
        if type(value) is not int and hasattr(value, "numel") and hasattr(value, "item"):
            if value.numel() != 1:
                raise TypeError(f"{self._where(i)} is a scalar {base} in the kernel, got a tensor of shape "
                                f"{list(value.shape)}")
            value = value.item()
        if kind == "bool":
            return bool(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{self._where(i)} must be a Python number for the kernel's {base}, got "
                            f"{type(value).__name__}")
        if kind == "float":
            return float(value)
        if kind == "half":
            return struct.unpack("<H", struct.pack("<e", float(value)))[0]
        if kind == "bf16":
            import torch

            return int(torch.tensor(float(value), dtype=torch.bfloat16).view(torch.int16).item()) & 0xFFFF
        if isinstance(value, float):
            if not value.is_integer():
                raise TypeError(f"{self._where(i)} is an integer ({base}) in the kernel, got the float {value}")
            value = int(value)
        if not lo <= value <= hi:
            raise OverflowError(f"{self._where(i)} = {value} does not fit the kernel's {base} ({lo}..{hi}); use "
                                f"int64_t")
        return value

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
        device_index = m.device_index
        values = [self._pointer(i, c, v, device_index) if c[0] == "ptr" else self._scalar(i, c, v)
                  for i, (c, v) in enumerate(zip(self._conv, args))]
        if stream is None:
            handle = m.current_stream()
        else:
            handle = getattr(stream, "cuda_stream", stream)
            if not isinstance(handle, int):
                raise TypeError(f"stream must be a torch.cuda.Stream, got {type(stream).__name__}")
        with self._lock:
            for h, v in zip(self._holders, values):
                h.value = v
            launches.record(self.name)
            code = a.cuLaunchKernel(self._func, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem, handle,
                                    self._params, None)
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
