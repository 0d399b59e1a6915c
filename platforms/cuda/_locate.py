"""Finding NVRTC and the CUDA headers on disk, without loading anything.

`platforms.cuda`'s availability() runs in the caller's process, so it only looks for files here; the library is
loaded (in the child, inside `guards.trusted()`) by `platforms.cuda._binding`. Searched: KFORGE_NVRTC, torch's
wheel dependencies (`nvidia-cuda-nvrtc`, `nvidia-cuda-runtime`), CUDA_HOME / CUDA_PATH and the usual toolkit paths.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from pathlib import Path


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
