"""Import problem and candidate files as fresh modules, and build the models."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

from ...gallery import declared_cpu_sizes


class CandidateShapeError(Exception):
    """The candidate module lacks ModelNew (or NewModel), or it is not an nn.Module."""


def import_file(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def size_overrides(module: ModuleType, size_class: str | None) -> dict:
    """Gallery problems carry `CPU_SIZES = {global: value}`; the CPU size class applies them (read as the gallery
    reads them; a problem without CPU_SIZES has no overrides here, where `gallery.size_overrides` refuses it)."""
    if size_class == "cpu":
        return dict(declared_cpu_sizes(module) or {})
    return {}


def candidate_class(module: ModuleType):
    for name in ("ModelNew", "NewModel"):
        cls = getattr(module, name, None)
        if cls is not None:
            if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
                raise CandidateShapeError(f"{name} must be a subclass of torch.nn.Module")
            return cls
    raise CandidateShapeError("the candidate defines no ModelNew class (NewModel is accepted too)")


def to_device(obj, device: torch.device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    return obj


def clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone(x) for x in obj)
    return obj


def tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(x) for x in obj.values())
    return 0


def check_inputs(inputs) -> None:
    """KernelBench inputs: a list/tuple of tensors, lists/tuples of tensors, and Python scalars."""
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"get_inputs() must return a list, got {type(inputs).__name__}")

    def ok(x) -> bool:
        if isinstance(x, (torch.Tensor, int, float, bool)) or x is None:
            return True
        return isinstance(x, (list, tuple)) and all(ok(y) for y in x)

    for i, x in enumerate(inputs):
        if not ok(x):
            raise TypeError(f"get_inputs() item {i} is a {type(x).__name__}; inputs must be tensors, lists/tuples of "
                            f"tensors, or Python scalars")
