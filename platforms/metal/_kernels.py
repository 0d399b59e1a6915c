"""Checked, counted kernel calls over a library compiled by `torch.mps.compile_shader`.

`lib.my_kernel(x, out, n, threads=..., group_size=...)` checks every argument against the kernel's declaration
(`_metal_signatures`), narrows scalars to the declared type through `arg_casts`, records the launch
(`kforge_core.eval.harness.launches`) and, while a profile is taken, times it between two MPS events (`_metal_profile`).
"""

from __future__ import annotations

from kforge_core.eval.harness import launches

from ._profile import recorder
from ._signatures import KernelSignature, bind_arguments, normalize_dispatch


def _supports_arg_casts(native_kernel) -> bool:
    """The pybind signature of the kernel call lists its keyword arguments; arg_casts is there in torch >= 2.7."""
    doc = getattr(type(native_kernel).__call__, "__doc__", None) or ""
    return "arg_casts" in doc if doc else True


class MetalKernel:
    """One kernel of a compiled library. Call with the kernel's buffer arguments in [[buffer(i)]] order, and
    `threads=` (total threads, 1-3 dims) and optionally `group_size=` (threads per threadgroup, same dims)."""

    def __init__(self, name: str, native, signature: KernelSignature | None, device_type: str = "mps"):
        self.name = name
        self.signature = signature
        self._native = native
        self._device_type = device_type
        self._casts_supported = _supports_arg_casts(native)
        self._max_threads = self._native_int("max_threads_per_threadgroup")

    def _native_int(self, attr: str) -> int | None:
        try:
            value = getattr(self._native, attr)
        except Exception:  # noqa: BLE001 - a fake or an older torch without the property
            return None
        return int(value) if isinstance(value, int) and value > 0 else None

    @property
    def max_threads_per_threadgroup(self) -> int | None:
        return self._max_threads

    @property
    def thread_execution_width(self) -> int | None:
        """SIMD-group width (32 on Apple GPUs): make group sizes a multiple of it."""
        return self._native_int("thread_execution_width")

    @property
    def static_thread_group_memory_length(self) -> int | None:
        return self._native_int("static_thread_group_memory_length")

    def __call__(self, *args, threads=None, group_size=None, arg_casts=None):
        grid_dims = self.signature.grid_dims if self.signature is not None else None
        t, g = normalize_dispatch(self.name, threads, group_size, self._max_threads, grid_dims)
        bound = bind_arguments(self.signature, self.name, args, self._device_type, self._casts_supported)
        casts = {**bound.casts, **(dict(arg_casts) if arg_casts else {})}
        kwargs = {"threads": t}
        if g is not None:
            kwargs["group_size"] = g
        if casts:
            kwargs["arg_casts"] = casts
        launches.record(self.name)
        native = self._native
        return recorder.launch(self.name, lambda: native(*bound.args, **kwargs))

    def __repr__(self) -> str:
        return f"<Metal kernel {self.signature or self.name}>"


class MetalLibrary:
    """Attribute access gives the library's kernels (`lib.swish_bias`); `kernels` lists what the source declares."""

    def __init__(self, native, signatures: dict[str, KernelSignature], key: str, cached: bool, build_s: float,
                 device_type: str = "mps"):
        self.key, self.cached, self.build_s = key, cached, build_s
        self._native = native
        self._signatures = signatures
        self._device_type = device_type
        self._kernels: dict[str, MetalKernel] = {}

    @property
    def kernels(self) -> list[str]:
        return sorted(set(self._signatures) | set(self._kernels))

    def kernel(self, name: str) -> MetalKernel:
        found = self._kernels.get(name)
        if found is not None:
            return found
        try:
            native = getattr(self._native, name)
        except Exception as e:  # noqa: BLE001 - torch raises RuntimeError for a missing function
            known = ", ".join(self.kernels) or "none"
            raise AttributeError(f"the Metal library has no kernel {name!r} (declared: {known}); "
                                 f"{str(e).splitlines()[0] if str(e) else ''}".rstrip("; ")) from None
        k = MetalKernel(name, native, self._signatures.get(name), self._device_type)
        self._kernels[name] = k
        return k

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.kernel(name)

    def __dir__(self):
        return self.kernels

    def __repr__(self) -> str:
        return f"<Metal library {self.key}: {', '.join(self.kernels)}>"
