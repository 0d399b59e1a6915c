"""The JSON encoding of what the trace child reads (`kforge_core.synth.trace`): call arguments, node values, the
module tree (constructors of `torch.nn` modules, parameters and buffers) and `get_init_inputs()`. The shapes are the
ones the trace module's docstring states (the contract with `lower/graph.py`). Runs in the child only.
"""

from __future__ import annotations

import math


def encode_arg(a):
    import torch
    import torch.fx

    if isinstance(a, torch.fx.Node):
        return {"n": a.name}
    if isinstance(a, bool) or a is None or isinstance(a, (int, str)):
        return a
    if isinstance(a, float):
        if math.isfinite(a):
            return a
        return {"float": "nan" if math.isnan(a) else ("inf" if a > 0 else "-inf")}
    if isinstance(a, tuple):
        return {"tuple": [encode_arg(x) for x in a]}
    if isinstance(a, list):
        return [encode_arg(x) for x in a]
    if isinstance(a, slice):
        return {"slice": [encode_arg(a.start), encode_arg(a.stop), encode_arg(a.step)]}
    if a is Ellipsis:
        return {"ellipsis": 1}
    if isinstance(a, torch.dtype):
        return {"dtype": str(a).replace("torch.", "")}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    if isinstance(a, (torch.memory_format, torch.layout)):
        return {"torch": str(a).replace("torch.", "")}
    if isinstance(a, dict):
        return {"opaque": f"dict {a!r}"[:200]}
    return {"opaque": repr(a)[:200]}


def describe_value(v, depth: int = 0):
    import torch

    if isinstance(v, torch.Tensor):
        try:
            contiguous = bool(v.is_contiguous())
            strides = list(v.stride())
        except RuntimeError:  # sparse / nested tensors
            contiguous, strides = False, None
        return {"k": "t", "shape": [int(s) for s in v.shape], "dtype": str(v.dtype).replace("torch.", ""),
                "strides": strides, "contiguous": contiguous}
    if isinstance(v, bool):
        return {"k": "s", "type": "bool", "v": v}
    if isinstance(v, int):
        return {"k": "s", "type": "int", "v": v}
    if isinstance(v, float):
        return {"k": "s", "type": "float", "v": v if math.isfinite(v) else encode_arg(v)}
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        return {"k": "s", "type": "sym"}
    if isinstance(v, (tuple, list)) and depth < 3:
        return {"k": "seq", "items": [describe_value(x, depth + 1) for x in v]}
    if isinstance(v, torch.dtype):
        return {"k": "dtype", "v": str(v).replace("torch.", "")}
    if v is None:
        return {"k": "none"}
    return {"k": "other", "type": type(v).__name__}


_SIMPLE_TYPES = (int, float, bool, str, type(None))


def simple_attrs(module) -> dict:
    out = {}
    for key, value in vars(module).items():
        if key.startswith("_") or key == "training":
            continue
        if isinstance(value, _SIMPLE_TYPES) or (isinstance(value, tuple) and all(isinstance(x, _SIMPLE_TYPES)
                                                                                   for x in value)):
            if isinstance(value, float) and not math.isfinite(value):
                value = encode_arg(value)
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def _state_entry(name: str, t, kind: str, persistent: bool = True) -> dict:
    return {"name": name, "shape": [int(s) for s in t.shape], "dtype": str(t.dtype).replace("torch.", ""),
            "kind": kind, "persistent": persistent, "requires_grad": bool(getattr(t, "requires_grad", False))}


def _module_ctor(module) -> str | None:
    """`torch.nn.<repr>` when the module is a childless torch.nn module whose repr rebuilds the same state."""
    import torch

    cls = type(module)
    if not cls.__module__.startswith("torch.nn.modules") or list(module.children()):
        return None
    text = f"torch.nn.{repr(module)}"
    if "\n" in text or getattr(torch.nn, cls.__name__, None) is not cls:
        return None
    try:
        with torch.device("meta"):
            rebuilt = eval(text, {"torch": torch, "inf": math.inf, "nan": math.nan})  # noqa: S307 - child only
    except Exception:  # noqa: BLE001 - a repr that does not rebuild the module: declare its tensors instead
        return None
    want = {k: (tuple(v.shape), v.dtype) for k, v in module.state_dict().items()}
    got = {k: (tuple(v.shape), v.dtype) for k, v in rebuilt.state_dict().items()}
    if want == got:
        return text
    if {k: s for k, (s, _) in want.items()} == {k: s for k, (s, _) in got.items()}:
        dtypes = {d for _, d in want.values()}
        if len(dtypes) == 1:
            return f"{text}.to({dtypes.pop()})"
    return None


def describe_modules(model) -> list[dict]:
    out = []
    for path, module in model.named_modules():
        params = [_state_entry(n, p, "param") for n, p in module.named_parameters(recurse=False)]
        non_persistent = getattr(module, "_non_persistent_buffers_set", set())
        buffers = [_state_entry(n, b, "buffer", n not in non_persistent)
                   for n, b in module.named_buffers(recurse=False) if b is not None]
        cls = type(module)
        out.append({"path": path, "cls": cls.__name__, "cls_module": cls.__module__,
                    "ctor": _module_ctor(module) if path else None, "attrs": simple_attrs(module),
                    "training": bool(module.training), "params": params, "buffers": buffers,
                    "children": [name for name, _ in module.named_children()]})
    return out


def init_encoding(init) -> list | None:
    """`get_init_inputs()` encoded as arguments are (tuples stay tuples: the candidate compares the arguments it
    is given with these, and `(3, 3) != [3, 3]`); None when some argument has no faithful literal (a tensor, an
    object, NaN, which equals nothing)."""
    enc = encode_arg(list(init))

    def faithful(a) -> bool:
        if isinstance(a, list):
            return all(faithful(x) for x in a)
        if isinstance(a, dict):
            if "tuple" in a:
                return all(faithful(x) for x in a["tuple"])
            return set(a) <= {"float", "dtype", "device"} and a.get("float") != "nan"
        return True

    return enc if faithful(enc) else None
