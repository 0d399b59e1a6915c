"""The ctypes binding of NVRTC and the CUDA driver API: load both libraries, resolve ~30 functions, report errors.

Why ctypes on libnvrtc + libcuda (and not CuPy or cuda-python): a CUDA build of torch already depends on both —
`libcuda.so.1` comes with the NVIDIA driver and torch's wheels pull in NVRTC (`nvidia-cuda-nvrtc`; torch's own
jiterator compiles through it) — so this path needs nothing that torch itself does not need. CuPy and cuda-python
are optional extras many users do not have, and CuPy launches on its own streams unless told otherwise. The binding
is small: the NVRTC/driver functions below, resolved once per process by `api()` inside `guards.trusted()`
(dlopen/dlsym are refused to candidate code), then called directly.
"""

from __future__ import annotations

import ctypes
import glob
import os

from kforge_core.eval.harness import guards

from ._locate import nvrtc_candidates

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
