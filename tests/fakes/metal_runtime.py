"""Stand-ins for torch's Metal shader objects (`torch.mps.compile_shader`'s library and its kernels), so the Metal
platform's host side runs on any machine: each kernel records the call it would have encoded and, given an
implementation, runs it with torch ops on CPU tensors."""

from __future__ import annotations


class FakeNativeKernel:
    """Stands in for torch's _mps_MetalKernel: records the call it would have encoded."""

    max_threads_per_threadgroup = 1024
    thread_execution_width = 32

    def __init__(self, name, impl=None):
        self.name, self.impl, self.calls = name, impl, []

    def __call__(self, *args, threads=None, group_size=None, arg_casts=None):
        """__call__(self, *args, threads: object = None, group_size: object = None, arg_casts: object = None)"""
        self.calls.append((args, threads, group_size, arg_casts))
        if self.impl is not None:
            self.impl(*args, threads=threads)


class FakeNativeLibrary:
    def __init__(self, impls=None):
        self.impls, self.kernels = impls or {}, {}

    def __getattr__(self, name):
        if name.startswith("_") or name in ("impls", "kernels"):
            raise AttributeError(name)
        if name not in self.kernels:
            if self.impls and name not in self.impls:
                raise RuntimeError(f"Failed to create function state object for: {name}")
            self.kernels[name] = FakeNativeKernel(name, self.impls.get(name))
        return self.kernels[name]
