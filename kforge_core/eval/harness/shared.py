"""Tensors between the judge and the candidate's process: an anonymous shared mapping and small JSON messages.

The judge (`harness.run` with a peer) and the candidate's process (`harness.worker`) share one socket pair
(SOCK_SEQPACKET, made by the caller before either started) and, over it, an *arena*: a memfd the judge creates
(no name in any filesystem, so no /dev/shm), sizes, seals against shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW:
the other side can write it but never truncate it under the judge's mapping, which would be a SIGBUS) and passes
with SCM_RIGHTS. Inputs are written into it by the judge, outputs by the worker, each tensor at a 64-byte aligned
offset described by a JSON layout: {"t": [dtype, shape, offset]} for a tensor, {"l": [...], "tuple": bool} for a
list or tuple, {"v": scalar} for a Python scalar, {"o": type name} for anything else (never rebuilt, only named).

Tensors cross as host bytes: the judge copies a device tensor to the host mapping, the worker copies from it to its
own device. On CUDA the arena lives in device memory instead where the driver allows (`device_arena`: the same
layouts, no PCIe crossing); this host arena is the fallback, which needs nothing a runtime can refuse. Everything read
from the other side is checked (dtype known, shape sane, bytes within the arena) before it is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import mmap
import os
import resource
import socket

import torch

ALIGN = 64
MAX_MESSAGE = 1 << 17  # one SEQPACKET message; a longer JSON payload travels in a memfd of its own
MAX_BIG_MESSAGE = 1 << 26


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message or layout."""


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def sealed_memfd(size: int, name: str = "kforge-arena") -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    with _file_size_limit_lifted(size):
        os.ftruncate(fd, max(size, 1))
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd


@contextlib.contextmanager
def _file_size_limit_lifted(size: int):
    """Sizing a memfd counts against RLIMIT_FSIZE like a file write; an isolated judge's soft limit (4 GiB) is below
    an arena for KernelBench-sized tensors, while its hard limit is left open for exactly this (`isolation`): lift
    the soft limit for the one call, then put it back."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    lift = soft != resource.RLIM_INFINITY and size > soft and (hard == resource.RLIM_INFINITY or hard > soft)
    if lift:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    try:
        yield
    finally:
        if lift:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def check_sealed(fd: int) -> int:
    """The size of a memfd the other side sent, refused unless it can no longer change size."""
    need = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError as e:
        raise ProtocolError(f"a shared buffer that is not a sealed memfd: {e}") from None
    if seals & need != need:
        raise ProtocolError("a shared buffer whose size is not sealed")
    return os.fstat(fd).st_size


PIN_MIN_BYTES = 64 << 20  # below this, page-locking costs more than the faster copies save
_driver: dict = {}


def prepare_pinning(device) -> None:
    """Resolve the driver's host-registration calls now, before any candidate is imported into this process (its
    guards watch what is loaded after that). The driver API, not the runtime's cudaHostRegister: a refused runtime
    call leaves an error that torch's next kernel-launch check would report as the candidate's."""
    if _driver or torch.device(device).type != "cuda":
        return
    try:
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
        register, unregister = lib.cuMemHostRegister_v2, lib.cuMemHostUnregister
    except (OSError, AttributeError):
        _driver["missing"] = True
        return
    register.argtypes, register.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint], ctypes.c_int
    unregister.argtypes, unregister.restype = [ctypes.c_void_p], ctypes.c_int
    _driver.update(register=register, unregister=unregister)


class Arena:
    """One shared mapping; `view(offset, count, dtype)` is a CPU tensor over it (no copy). Its counterpart in
    device memory is `device_arena.DeviceArena`."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._pinned_ptr: int | None = None

    def pin(self, device) -> bool:
        """Page-lock the mapping for the CUDA device in this process (each side registers its own mapping), so
        copies between it and the device are DMA from the shared pages themselves rather than through the
        driver's pageable staging buffer: KernelBench-sized tensors (6 GiB) cross it several times a call. Where
        the driver refuses (some container runtimes, gVisor), copies stay pageable: same bytes, slower."""
        if self._pinned_ptr is not None or self.size < PIN_MIN_BYTES or "register" not in _driver \
                or torch.device(device).type != "cuda":
            return self._pinned_ptr is not None
        torch.cuda.synchronize(device)  # the device's primary context current on this thread
        ptr = torch.frombuffer(self.map, dtype=torch.uint8, count=1).data_ptr()
        if _driver["register"](ptr, self.size, 0x01) != 0:  # CU_MEMHOSTREGISTER_PORTABLE
            return False
        self._pinned_ptr = ptr
        return True

    @property
    def pinned(self) -> bool:
        return self._pinned_ptr is not None

    def sync(self) -> None:
        pass  # host copies are done when they return

    @classmethod
    def create(cls, size: int) -> Arena:
        size = max(_align(size), 1 << 16)
        return cls(sealed_memfd(size), size)

    def view(self, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        if count == 0:
            return torch.empty(0, dtype=dtype)
        return torch.frombuffer(self.map, dtype=dtype, count=count, offset=offset)

    def close(self) -> None:
        if self._pinned_ptr is not None:
            _driver["unregister"](self._pinned_ptr)  # before the pages can go
            self._pinned_ptr = None
        try:
            os.close(self.fd)
        except OSError:
            pass
        # the mapping itself goes when the last tensor over it does (mmap.close() refuses while one exists)


# ------------------------------------------------------------------------------------------------ layouts

_DTYPES = {str(d): d for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
                                torch.complex128, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                                torch.bool, *(getattr(torch, name) for name in (
                                    "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64")
                                    if isinstance(getattr(torch, name, None), torch.dtype)))}


def _dtype(name) -> torch.dtype:
    if name not in _DTYPES:
        raise ProtocolError(f"unknown dtype {str(name)[:40]!r}")
    return _DTYPES[name]


def write(arena: Arena, value, offset: int) -> tuple[dict, int]:
    """Write `value` (tensors, lists/tuples of them, scalars) into the arena from `offset`; returns (layout, end).
    A tensor that does not fit is described without its bytes ({"t": [...], "nofit": true})."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        n, start = nbytes(t), _align(offset)
        desc = [str(t.dtype), list(t.shape), start]
        if t.dtype not in _DTYPES.values() or start + n > arena.size:
            return {"t": desc, "nofit": True, "type": type(value).__name__}, offset
        if n:
            arena.view(start, n, torch.uint8).copy_(t.contiguous().reshape(-1).view(torch.uint8))
        layout = {"t": desc}
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            layout["type"] = type(value).__name__
        return layout, start + n
    if isinstance(value, (list, tuple)):
        items = []
        for item in value:
            layout, offset = write(arena, item, offset)
            items.append(layout)
        return {"l": items, "tuple": isinstance(value, tuple)}, offset
    if isinstance(value, dict):
        keys = sorted(value, key=str)
        layout, offset = write(arena, [value[k] for k in keys], offset)
        return {"d": [str(k) for k in keys], "l": layout["l"]}, offset
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"v": value}, offset
    return {"o": type(value).__name__[:80]}, offset


def read(arena: Arena, layout, device: torch.device | str = "cpu", into=None):
    """The value a layout describes, as private tensors on `device` (copied out of the arena: later writes there
    change nothing). With `into` (the previous call's value, same structure), tensors are copied into those same
    tensors (same addresses). Raises ProtocolError on a malformed layout."""
    if not isinstance(layout, dict):
        raise ProtocolError("a layout entry is not an object")
    if "t" in layout:
        dtype, shape, offset, n = _tensor_entry(layout["t"])
        if layout.get("nofit"):
            t = torch.empty(shape, dtype=dtype, device="meta")  # a shape or dtype the judge can name, no values
            return _as_named_subclass(t, layout.get("type"))
        if offset < 0 or offset % ALIGN or offset + n > arena.size:
            raise ProtocolError("a tensor outside the shared buffer")
        src = arena.view(offset, n, torch.uint8).view(dtype).reshape(shape)
        if isinstance(into, torch.Tensor) and into.shape == src.shape and into.dtype == dtype:
            into.copy_(src)
            return into
        out = src.to(device, copy=True)
        return _as_named_subclass(out, layout.get("type"))
    if "l" in layout:
        items = layout["l"]
        if not isinstance(items, list):
            raise ProtocolError("a list layout without items")
        prev = into if isinstance(into, (list, tuple)) and len(into) == len(items) else [None] * len(items)
        values = [read(arena, item, device, p) for item, p in zip(items, prev)]
        if "d" in layout:
            keys = layout["d"]
            if not isinstance(keys, list) or len(keys) != len(values):
                raise ProtocolError("a dict layout whose keys and values differ in number")
            return dict(zip(map(str, keys), values))
        return tuple(values) if layout.get("tuple") else values
    if "v" in layout:
        v = layout["v"]
        if not (v is None or isinstance(v, (bool, int, float, str))):
            raise ProtocolError("a scalar that is not one")
        return v
    if "o" in layout:
        return type(str(layout["o"])[:80] or "object", (), {})()  # named for the verdict, never rebuilt
    raise ProtocolError("an unknown layout entry")


def views(arena: Arena, layout):
    """The value a layout this side wrote describes, with its tensors as views over the arena (no copy; they
    change when the arena does); None where a tensor was not written as a plain one (too large, an unknown dtype,
    a subclass)."""
    if "t" in layout:
        if layout.get("nofit") or "type" in layout:
            return None
        dtype, shape, offset, n = _tensor_entry(layout["t"])
        return arena.view(offset, n, torch.uint8).view(dtype).reshape(shape)
    if "l" in layout and "d" not in layout:
        items = [views(arena, item) for item in layout["l"]]
        if any(item is None and "v" not in entry for item, entry in zip(items, layout["l"])):
            return None
        return tuple(items) if layout.get("tuple") else items
    if "v" in layout:
        return layout["v"]
    return None


def _tensor_entry(desc) -> tuple[torch.dtype, list[int], int, int]:
    """(dtype, shape, offset, bytes) of a tensor entry."""
    dtype_name, shape, offset = _tensor_fields(desc)
    dtype = _dtype(dtype_name)
    numel = 1
    for s in shape:
        numel *= s
    return dtype, shape, offset, numel * torch.empty(0, dtype=dtype).element_size()


def _tensor_fields(desc) -> tuple[str, list[int], int]:
    if not (isinstance(desc, list) and len(desc) == 3 and isinstance(desc[1], list) and isinstance(desc[2], int)):
        raise ProtocolError("a malformed tensor entry")
    shape = desc[1]
    if len(shape) > 16 or not all(isinstance(s, int) and 0 <= s < (1 << 40) for s in shape):
        raise ProtocolError("a malformed tensor shape")
    return desc[0], shape, desc[2]


def _as_named_subclass(t: torch.Tensor, name):
    """A tensor the candidate's process returned as a torch.Tensor subclass comes back as a (harmless) subclass of
    the same name, so the comparison refuses it by type exactly as it would in one process."""
    if not name or name in ("Tensor", "Parameter"):
        return t
    cls = type(str(name)[:80], (torch.Tensor,), {})
    return torch.Tensor._make_subclass(cls, t)


def total_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return _align(nbytes(value)) + ALIGN
    if isinstance(value, (list, tuple)):
        return sum(total_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(total_bytes(v) for v in value.values())
    return 0


# ----------------------------------------------------------------------------------------------- messages

def send(sock: socket.socket, obj: dict, fds: list[int] = ()) -> None:
    data = json.dumps(obj, default=str).encode()
    big = None
    if len(data) > MAX_MESSAGE:
        big = sealed_memfd_with(data)
        fds, data = [*fds, big], json.dumps({"big": len(data)}).encode()
    try:
        if fds:
            socket.send_fds(sock, [data], list(fds))
        else:
            sock.send(data)
    finally:
        if big is not None:
            os.close(big)


def sealed_memfd_with(data: bytes) -> int:
    fd = os.memfd_create("kforge-message", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE |
                fcntl.F_SEAL_SEAL)
    return fd


def recv(sock: socket.socket, max_fds: int = 2) -> tuple[dict, list[int]]:
    """One message and the descriptors that came with it. EOFError when the other side is gone."""
    data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE + 1, max_fds + 1)
    if not data:
        for fd in fds:
            os.close(fd)
        raise EOFError("the other process closed the channel")
    try:
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        if "big" in obj:
            if not fds or not isinstance(obj["big"], int) or not 0 < obj["big"] <= MAX_BIG_MESSAGE:
                raise ValueError("a long message without its buffer")
            big = fds.pop()
            try:
                size = min(check_sealed(big), obj["big"])
                obj = json.loads(os.pread(big, size, 0))
            finally:
                os.close(big)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
    except (ValueError, ProtocolError) as e:
        for fd in fds:
            os.close(fd)
        raise ProtocolError(f"an unreadable message: {e}") from None
    return obj, fds
