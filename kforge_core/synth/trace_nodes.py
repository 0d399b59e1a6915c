"""The graph's nodes as the trace child describes them: from a `torch.fx` trace (values recorded by running the
graph) or, as a fallback, from `torch.export` (aten-level, parameters lifted to get_attr nodes). Runs in the child
only (`kforge_core.synth.trace`).
"""

from __future__ import annotations

import json

from .trace_values import describe_value, encode_arg, simple_attrs

_PUBLIC_FUNCTION_HOMES = ("torch.nn.functional", "torch", "torch.special", "torch.linalg", "torch.fft", "operator",
                          "math", "builtins")


def _qualified_name(target) -> str | None:
    """A public, importable name for a call_function target (identity match), e.g. 'torch.nn.functional.gelu'."""
    import importlib

    name = getattr(target, "__name__", None)
    if not name:
        return None
    for home in _PUBLIC_FUNCTION_HOMES:
        try:
            mod = importlib.import_module(home)
        except ImportError:
            continue
        if getattr(mod, name, None) is target:
            return f"{home}.{name}"
    return None



def graph_signature(gm) -> list:
    return [(n.op, str(n.target), json.dumps(encode_arg(n.args)), json.dumps(encode_arg(dict(n.kwargs))
                                                                               if n.kwargs else {}))
            for n in gm.graph.nodes]


def _scalar_constant(gm, target: str, state: set):
    """The value of a 0-dim tensor fx made a constant of while tracing (`torch.tensor(0.5)` in forward, with no
    traced argument, becomes a `_tensor_constant<n>` attribute of the graph module), encoded; None for model state
    (the candidate copies that) and anything else."""
    import torch

    if target in state:
        return None
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    if not isinstance(obj, torch.Tensor) or obj.dim() != 0 or obj.is_meta or obj.is_complex():
        return None
    try:
        return {"value": encode_arg(obj.item()), "dtype": str(obj.dtype).replace("torch.", "")}
    except (RuntimeError, ValueError):
        return None


def fx_nodes(gm, model, values: dict) -> list[dict]:
    import torch

    modules = dict(model.named_modules())
    state = set(model.state_dict())
    nodes = []
    for n in gm.graph.nodes:
        entry = {"name": n.name, "op": n.op, "target": None, "args": encode_arg(tuple(n.args))["tuple"],
                 "kwargs": {k: encode_arg(v) for k, v in n.kwargs.items()}, "value": values.get(n.name)}
        if n.op == "call_function":
            if isinstance(n.target, torch._ops.OpOverload):
                entry["target"] = f"aten.{n.target._schema.name.split('::')[-1]}.{n.target._overloadname}"
            else:
                entry["target"] = _qualified_name(n.target) or f"<private>{getattr(n.target, '__qualname__', n.target)}"
        elif n.op == "call_module":
            entry["target"] = str(n.target)
            m = modules.get(str(n.target))
            if m is not None:
                entry["module"] = {"cls": type(m).__name__, "cls_module": type(m).__module__,
                                   "attrs": simple_attrs(m), "training": bool(m.training)}
        else:
            entry["target"] = str(n.target)
            if n.op == "get_attr" and (const := _scalar_constant(gm, str(n.target), state)) is not None:
                entry["const"] = const
        nodes.append(entry)
    return nodes


def record_values(gm, inputs) -> dict:
    import torch
    import torch.fx

    values: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n.name] = describe_value(result)
            return result

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return values


def export_nodes(model, inputs) -> tuple[list[dict], list[str]]:
    """torch.export fallback: aten-level nodes; lifted parameters become get_attr nodes on their state names."""
    import torch

    ep = torch.export.export(model, tuple(inputs))
    sig = ep.graph_signature
    lifted = {}
    for spec in sig.input_specs:
        if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR") and spec.target is not None:
            lifted[spec.arg.name] = spec.target
    nodes, notes = [], ["traced with torch.export (fx could not trace the forward): shapes are specialized"]
    for n in ep.graph.nodes:
        val = n.meta.get("val")
        entry = {"name": n.name, "op": n.op, "target": str(n.target),
                 "args": encode_arg(tuple(n.args))["tuple"],
                 "kwargs": {k: encode_arg(v) for k, v in n.kwargs.items()},
                 "value": describe_value(val) if val is not None else None}
        if n.op == "placeholder" and n.name in lifted:
            entry["op"], entry["target"] = "get_attr", lifted[n.name]
        elif n.op == "call_function":
            if isinstance(n.target, torch._ops.OpOverload):
                name = n.target._schema.name.split("::")[-1]
                entry["target"] = f"aten.{name}.{n.target._overloadname}"
                entry["schema"] = [a.name for a in n.target._schema.arguments]
                entry["emit"] = _public_aten_emission(name)
            else:
                entry["target"] = _qualified_name(n.target) or f"<private>{n.target}"
        if n.op == "output":
            entry["args"] = [entry["args"][0]["tuple"][0]] if (
                isinstance(entry["args"][0], dict) and "tuple" in entry["args"][0]
                and len(entry["args"][0]["tuple"]) == 1) else entry["args"]
        nodes.append(entry)
    return nodes, notes


def _public_aten_emission(name: str) -> dict | None:
    """How to call an aten op through public torch API with the schema's positional arguments."""
    import torch

    if name == "slice":
        return {"style": "slice"}
    if name.startswith("_"):
        return None
    if callable(getattr(torch, name, None)):
        return {"style": "function", "name": f"torch.{name}"}
    if callable(getattr(torch.Tensor, name, None)):
        return {"style": "method", "name": name}
    return None
