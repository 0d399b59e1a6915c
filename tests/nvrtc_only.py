"""NVRTC without a GPU: compile a candidate's CUDA source for an architecture, through the platform's own compile
routine (`platforms.cuda._nvrtc._nvrtc_compile`: its stand-in headers, its options), with only the NVRTC library
loaded (the platform's `api()` also loads the driver, absent on a machine without a GPU).

`nvrtc()` is None when no NVRTC library loads (KFORGE_NVRTC=/path/to/libnvrtc.so.12 points at one); tests skip then.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import re
from types import SimpleNamespace

_SIGS = {
    "nvrtcCreateProgram": ["p*", "s", "s", "i", "s*", "s*"], "nvrtcDestroyProgram": ["p*"],
    "nvrtcCompileProgram": ["p", "i", "s*"], "nvrtcGetProgramLogSize": ["p", "z*"], "nvrtcGetProgramLog": ["p", "s"],
    "nvrtcGetCUBINSize": ["p", "z*"], "nvrtcGetCUBIN": ["p", "s"], "nvrtcAddNameExpression": ["p", "s"],
    "nvrtcGetLoweredName": ["p", "s", "s*"], "nvrtcGetErrorString": ["i"],
}
_TYPES = {"p": ctypes.c_void_p, "s": ctypes.c_char_p, "i": ctypes.c_int, "z": ctypes.c_size_t}


@functools.lru_cache(maxsize=1)
def nvrtc() -> SimpleNamespace | None:
    """The NVRTC functions `_nvrtc_compile` calls, or None when no library loads."""
    from platforms.cuda._locate import nvrtc_candidates

    for cand in nvrtc_candidates():
        try:
            lib = ctypes.CDLL(cand)
        except OSError:
            continue
        if os.path.sep in cand:  # NVRTC loads its builtins by soname: the ones beside it first
            for b in sorted(glob.glob(os.path.join(os.path.dirname(cand), "libnvrtc-builtins.so*"))):
                if ".alt." not in os.path.basename(b):
                    ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                    break
        api = SimpleNamespace(path=cand)
        for name, sig in _SIGS.items():
            fn = getattr(lib, name)
            fn.argtypes = [ctypes.POINTER(_TYPES[t[0]]) if t.endswith("*") else _TYPES[t] for t in sig]
            fn.restype = ctypes.c_char_p if name == "nvrtcGetErrorString" else ctypes.c_int
            setattr(api, name, fn)
        api.nvrtc_error = lambda code, f=api.nvrtcGetErrorString: f(code).decode()
        return api
    return None


def compile_source(source: str, arch: str = "sm_90") -> tuple[bool, str]:
    """(compiled, NVRTC's log) for `source` built as `compile_cuda` builds it."""
    from platforms.cuda._locate import include_dirs
    from platforms.cuda._nvrtc import _nvrtc_compile

    opts = [f"--gpu-architecture={arch}", "--std=c++17", "-default-device", *(f"-I{d}" for d in include_dirs())]
    image, _, log, code = _nvrtc_compile(nvrtc(), source, opts, [], "cubin")
    return image is not None and code == 0, log


def kernel_source(program: str) -> str:
    """The CUDA source a synthesized CUDA candidate compiles (its SOURCE string)."""
    return re.search(r'SOURCE = r"""\n(.*?)"""', program, re.S).group(1)


def assert_builtin_compiles(source: str, name: str, schedules) -> None:
    """The built-in's CUDA candidate for `source` under each schedule compiles with NVRTC (no GPU needed)."""
    from kforge_core.agents.builtin_generation import BuiltinGenerationAgent

    for sched in schedules:
        res = BuiltinGenerationAgent(size_class="cpu").synthesize(source, "cuda", sched, name)
        assert res.program, res.error
        ok, log = compile_source(kernel_source(res.program))
        assert ok, log
