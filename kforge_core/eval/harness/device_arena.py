"""The arena in device memory: tensors between the judge and the candidate's process without leaving the GPU.

The host arena (`shared.Arena`) moves every tensor through host memory: the judge copies device -> host, the
candidate's process host -> device, and the outputs back the same way, four PCIe crossings a call. At KernelBench's
sizes (6 GiB in, 6 GiB out) that was about 1.3 s a trial and most of a 28 s evaluation of a 5 ms kernel. Here the
judge allocates the arena on its GPU with the driver's virtual memory API (cuMemCreate), exports it as a POSIX file
descriptor (cuMemExportToShareableHandle) and passes that over the existing SCM_RIGHTS channel; the candidate's
process imports and maps it (cuMemImportFromShareableHandle). A descriptor, unlike legacy CUDA IPC handles (64 bytes
that open the memory for whoever reads them), is a capability: it crosses PID and IPC namespaces, and a process it
was not sent to has no way to open the memory.

The trust rules are the host arena's: the allocation is the arena alone (its own physical memory, never the
caching allocator's segments, where the judge's other tensors live), the judge copies outputs out into private
memory before comparing them, and never takes values from memory the other side can write. Each side synchronises
its device before it sends a message, so the other side's work starts after this side's copies are done.

Where any step is refused (no libcuda, an old driver, a runtime without VMM or descriptor handles, too little free
memory) the caller falls back to the host arena and says why (`RemoteCandidate.handover`).
"""

from __future__ import annotations

import ctypes
import os

import torch

ENV_SWITCH = "KFORGE_DEVICE_HANDOVER"  # "0": always the host arena (comparisons, a driver that misbehaves); read by
# the caller alone (`judged.HANDOVER_VARIABLE`), per evaluation, into the request both children get

_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_GRANULARITY_MINIMUM = 0


class HandoverUnavailable(Exception):
    """Device memory cannot be shared here; the message says which step refused. `lasting`: for the rest of the
    evaluation (the driver or the other process refused), not just for an arena of this size (too little room)."""

    def __init__(self, why: str, lasting: bool = True):
        super().__init__(why)
        self.lasting = lasting


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_SIGNATURES = {
    "cuMemGetAllocationGranularity": [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_Prop), ctypes.c_int],
    "cuMemCreate": [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t, ctypes.POINTER(_Prop), ctypes.c_ulonglong],
    "cuMemExportToShareableHandle": [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_ulonglong],
    "cuMemImportFromShareableHandle": [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_void_p, ctypes.c_int],
    "cuMemAddressReserve": [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t, ctypes.c_size_t,
                            ctypes.c_ulonglong, ctypes.c_ulonglong],
    "cuMemMap": [ctypes.c_ulonglong, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_ulonglong, ctypes.c_ulonglong],
    "cuMemSetAccess": [ctypes.c_ulonglong, ctypes.c_size_t, ctypes.POINTER(_Access), ctypes.c_size_t],
    "cuMemUnmap": [ctypes.c_ulonglong, ctypes.c_size_t],
    "cuMemAddressFree": [ctypes.c_ulonglong, ctypes.c_size_t],
    "cuMemRelease": [ctypes.c_ulonglong],
}
_driver: dict = {}


def enabled() -> bool:
    from . import context

    return bool((context.request or {}).get("device_handover", True))


def prepare(device) -> None:
    """Resolve the driver's functions now, before any candidate is imported into this process (its guards watch
    what is loaded after that); a failure is kept and reported when an arena is asked for."""
    if _driver or torch.device(device).type != "cuda":
        return
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        for name, args in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
            _driver[name] = fn
    except (OSError, AttributeError) as e:
        _driver.clear()
        _driver["missing"] = f"the CUDA driver's virtual memory API is not available: {e}"


def _call(name: str, *args) -> None:
    rc = _driver[name](*args)
    if rc != 0:
        raise HandoverUnavailable(f"{name} returned CUDA error {rc}")


def _usable(device) -> int:
    if not enabled():
        raise HandoverUnavailable(f"{ENV_SWITCH}=0")
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        raise HandoverUnavailable("not a CUDA device")
    if not _driver:
        prepare(device)
    if "missing" in _driver:
        raise HandoverUnavailable(_driver["missing"])
    torch.cuda.synchronize(device)  # the device's primary context current on this thread
    return torch.cuda.current_device() if torch.device(device).index is None else torch.device(device).index


def _prop(index: int) -> _Prop:
    prop = _Prop()
    prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
    prop.location.type, prop.location.id = _ON_DEVICE, index
    return prop


class _Mapping:
    """One mapped allocation in this process. Unmapped when the last tensor over it goes (as the host arena's
    mapping is): a view still held somewhere never points at unmapped memory, which would be a sticky CUDA error."""

    def __init__(self, handle: int, size: int, index: int):
        self.handle, self.size, self.ptr = handle, size, 0
        addr = ctypes.c_ulonglong(0)
        try:
            _call("cuMemAddressReserve", ctypes.byref(addr), size, 0, 0, 0)
            self.ptr = addr.value
            _call("cuMemMap", self.ptr, size, 0, handle, 0)
            access = _Access()
            access.location.type, access.location.id, access.flags = _ON_DEVICE, index, _READ_WRITE
            _call("cuMemSetAccess", self.ptr, size, ctypes.byref(access), 1)
        except HandoverUnavailable:
            self.handle = 0  # still the caller's to release
            self.release()
            raise
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (self.ptr, False),
                                         "version": 2, "strides": None}

    def release(self) -> None:
        if self.ptr:
            torch.cuda.synchronize()  # no copy still in flight on these pages
            _driver["cuMemUnmap"](self.ptr, self.size)
            _driver["cuMemAddressFree"](self.ptr, self.size)
            self.ptr = 0
        if self.handle:
            _driver["cuMemRelease"](self.handle)
            self.handle = 0

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the process's end frees it anyway
            pass


class DeviceArena:
    """The arena's interface (`shared.Arena`) over device memory: `view(offset, count, dtype)` is a device tensor
    over it (no copy)."""

    pinned = False

    def __init__(self, fd: int, size: int, mapping: _Mapping, device: torch.device):
        self.fd, self.size, self.device = fd, size, device
        self._base = torch.as_tensor(mapping, device=device)  # holds the mapping until the last view goes
        del mapping

    @classmethod
    def create(cls, size: int, device) -> DeviceArena:
        """A new arena of at least `size` bytes on `device`, and its descriptor to send. HandoverUnavailable when
        the driver refuses any step."""
        index = _usable(device)
        prop = _prop(index)
        gran = ctypes.c_size_t(0)
        _call("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(prop), _GRANULARITY_MINIMUM)
        step = max(gran.value, 1)
        size = max(step, (size + step - 1) // step * step)
        handle = ctypes.c_ulonglong(0)
        _call("cuMemCreate", ctypes.byref(handle), size, ctypes.byref(prop), 0)
        fd = ctypes.c_int(-1)
        try:
            _call("cuMemExportToShareableHandle", ctypes.byref(fd), handle.value, _POSIX_FD, 0)
            os.set_inheritable(fd.value, False)
            mapping = _Mapping(handle.value, size, index)
        except BaseException:
            if fd.value >= 0:
                os.close(fd.value)
            _driver["cuMemRelease"](handle.value)
            raise
        try:
            return cls(fd.value, size, mapping, torch.device("cuda", index))
        except BaseException:
            os.close(fd.value)  # the mapping, and with it the allocation, goes with its last reference
            raise

    @classmethod
    def open(cls, fd: int, size: int, device) -> DeviceArena:
        """The other side's arena, from the descriptor it sent (this side keeps and closes `fd`)."""
        index = _usable(device)
        handle = ctypes.c_ulonglong(0)
        _call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD)
        try:
            mapping = _Mapping(handle.value, size, index)
        except BaseException:
            _driver["cuMemRelease"](handle.value)
            raise
        return cls(fd, size, mapping, torch.device("cuda", index))

    def view(self, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        width = torch.empty(0, dtype=dtype).element_size()
        return self._base[offset:offset + count * width].view(dtype)

    def pin(self, device) -> bool:
        return False  # device memory: nothing to page-lock

    def sync(self) -> None:
        """This side's copies into and out of the arena are done (before a message lets the other side use it)."""
        torch.cuda.synchronize(self.device)

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        self._base = None  # the mapping goes with the last view over it


def offer(need: int, device, ask) -> DeviceArena:
    """A device arena of at least `need` bytes that the candidate's process has mapped: `ask(arena)` sends it (the
    `arena` request with its descriptor) and returns the reply. HandoverUnavailable when there is no room for it
    now, the driver refuses, or the other side could not map it (`why` in its reply)."""
    # the arena, the candidate's private copies of what crosses it and the judge's copy of its outputs: about three
    # times the arena, plus room for working memory; else the host arena, which takes no device memory
    _usable(device)  # switched off or not CUDA: said before anything else
    free, _ = torch.cuda.mem_get_info(device)
    if free < 3 * need + (1 << 30):
        raise HandoverUnavailable(f"{need / 2**30:.3g} GiB would leave too little of the {free / 2**30:.3g} GiB free "
                                  f"on the device", lasting=False)
    arena = DeviceArena.create(need, device)
    try:
        reply = ask(arena)
    except BaseException:
        arena.close()
        raise
    if reply.get("ok") is not True:
        arena.close()
        raise HandoverUnavailable(f"the candidate's process could not map it: {str(reply.get('why'))[:300]}")
    return arena
