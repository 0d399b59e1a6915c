"""Trace a problem's `Model` into a JSON graph description — in a child process, because the problem is user code.

Parent side: `trace_problem(source, size_class)` runs `trace` in an evaluation child (mode "trace" of
`kforge_core.eval.harness.child`, forked from the CPU fork server: private directory, scrubbed environment,
isolation, timeout, memory limit, nonce-framed result) and returns the description as a dict, or raises
`TraceFailed` with a readable reason.

Child side (`trace`): import the problem, apply the size class, build `Model(*get_init_inputs())` and its inputs (on
the meta device first, so even the file's GPU sizes cost no memory; real CPU tensors as a fallback), trace it with
`torch.fx.symbolic_trace` (falling back to `torch.export` when fx cannot trace, e.g. shape-dependent Python), record
every node's value (shape, dtype, strides, or Python scalar) by running the graph, and describe the module tree
(constructors of `torch.nn` modules, parameters and buffers) so a standalone candidate can re-declare the same
state_dict. The description is plain JSON; nothing from the child is ever executed by the parent.

Description shape (the contract with `graph.py`):
{"ok": true, "method": "fx"|"export", "size_class": ..., "init_args": [encoded arguments] | null,
 "nodes": [{"name", "op", "target", "args", "kwargs", "value", "module": {...}?, "emit": {...}?, "schema": [...]?,
            "const": {"value", "dtype"}? (a get_attr of a 0-dim tensor fx made in forward, not model state)}],
 "modules": [{"path", "cls", "ctor", "attrs", "training", "params": [...], "buffers": [...]}],
 "configs": [{"size_class", "init_args", "modules": [{"path", "ctor"}], "state": {key: [shape, dtype]}}],
 "problem_globals": {...}, "notes": [...]}
Encoded arguments: a node is {"n": name}; tuples {"tuple": [...]}; slices {"slice": [a, b, c]}; Ellipsis
{"ellipsis": 1}; dtypes {"dtype": "float32"}; devices {"device": "cpu"}; other torch enums {"torch": "name"};
floats that JSON cannot hold {"float": "inf"}; anything else {"opaque": "repr"} (such a node cannot be re-emitted).
"""

from __future__ import annotations

from pathlib import Path

from .trace_nodes import export_nodes, fx_nodes, graph_signature, record_values
from .trace_values import describe_modules, init_encoding


class TraceFailed(Exception):
    """The problem could not be traced; the message says why, for the user. `untraceable`: neither torch.fx nor
    torch.export can read the module (a limit of the tracer, not a failure of the run: the child ran fine)."""

    def __init__(self, message: str, *, untraceable: bool = False):
        super().__init__(message)
        self.untraceable = untraceable


# ------------------------------------------------------------------------------------------------ parent side

def trace_problem(source: str, size_class: str | None = None, *, timeout_s: float = 120.0,
                  memory_limit_mb: int = 8192) -> dict:
    """Trace `source` (a KernelBench problem) in a sandboxed child; returns the graph description. The child is
    forked from the CPU fork server (torch already imported) where one can run, as evaluations are: a spawned one
    paid a Python start and torch's import for every problem (2 s here, 6 s on the lent GPU machines)."""
    from kforge_core.eval.sandbox import run_child

    outcome = run_child({"mode": "trace", "size_class": size_class}, {"problem.py": source}, timeout_s=timeout_s,
                        memory_limit_mb=memory_limit_mb, limit_address_space=True, fork_server_safe=True)
    if outcome.timed_out:
        raise TraceFailed(f"tracing the problem did not finish within {timeout_s:g} s")
    result = outcome.result
    if result is None:
        tail = "\n".join(outcome.log.strip().splitlines()[-8:])
        why = f"signal {outcome.signal_name}" if outcome.signal_name else f"exit code {outcome.returncode}"
        raise TraceFailed(f"the tracing process died ({why}) before describing the graph"
                          + (f": {tail}" if tail else ""))
    if not result.get("ok"):
        raise TraceFailed(result.get("error") or "tracing failed for an unknown reason",
                          untraceable=bool(result.get("untraceable")))
    return result


# ------------------------------------------------------------------------------------------------- child side
# (the encoding of values and modules is `trace_values`, the graph's nodes `trace_nodes`)

def _build(module, device: str | None):
    import torch

    torch.manual_seed(0)
    init = module.get_init_inputs()
    if not isinstance(init, (list, tuple)):
        raise TypeError(f"get_init_inputs() must return a list, got {type(init).__name__}")
    if device == "meta":
        with torch.device("meta"):
            model = module.Model(*init)
            inputs = list(module.get_inputs())
    else:
        model = module.Model(*init)
        inputs = list(module.get_inputs())
    return list(init), model, inputs


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _trace_once(module, device: str | None):
    import torch
    import torch.fx

    init, model, inputs = _build(module, device)
    fx_error = None
    try:
        gm = torch.fx.symbolic_trace(model)
        values = record_values(gm, inputs)
        return init, model, "fx", fx_nodes(gm, model, values), [], gm
    except Exception as e:  # noqa: BLE001 - try torch.export next
        fx_error = _first_line(e)
    try:
        nodes, notes = export_nodes(model, inputs)
        return init, model, "export", nodes, notes + [f"fx: {fx_error}"], None
    except Exception as e:  # noqa: BLE001
        export_error = _first_line(e)
        raise TraceFailed(f"torch.fx could not trace Model.forward ({fx_error}); torch.export could not either "
                          f"({export_error}). Data-dependent control flow (an `if` on tensor values) cannot be "
                          f"synthesized by the built-in generator") from None


def _apply_size_class(module, originals: dict, size_class: str | None) -> None:
    vars(module).update(originals)
    if size_class == "cpu":
        vars(module).update(dict(getattr(module, "CPU_SIZES", {}) or {}))


def _config(size_class: str, init: list, model, modules: list[dict]) -> dict:
    """One size class's configuration: the init arguments ModelNew is given, its modules' constructors and the
    state_dict's shapes and dtypes."""
    return {"size_class": size_class, "init_args": init_encoding(init),
            "modules": [{"path": m["path"], "ctor": m["ctor"]} for m in modules],
            "state": {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in model.state_dict().items()}}


def trace(request: dict, workdir: Path) -> dict:
    import torch

    from kforge_core.eval.harness.loading import import_file

    size_class = request.get("size_class")
    try:
        module = import_file(workdir / "problem.py", "kforge_problem")
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": f"importing the problem raised {type(e).__name__}: {e}"}
    sizes = dict(getattr(module, "CPU_SIZES", {}) or {})
    originals = {k: vars(module)[k] for k in sizes if k in vars(module)}
    if size_class == "cpu" and not sizes:
        size_class = None
    _apply_size_class(module, originals, size_class)

    attempts = []
    result = None
    for device in ("meta", None):
        try:
            result = _trace_once(module, device)
            break
        except TraceFailed as e:
            attempts.append(str(e))
            if device is None:
                return {"ok": False, "error": str(e), "untraceable": True}
        except Exception as e:  # noqa: BLE001 - building the model or inputs failed on this device
            attempts.append(f"{'meta device' if device else 'cpu'}: {type(e).__name__}: {e}")
            if device is None:
                return {"ok": False, "error": "could not build and run the problem's Model: " + "; ".join(attempts)}
    init, model, method, nodes, notes, gm = result
    modules = describe_modules(model)
    configs = [_config(size_class or "gpu", init, model, modules)]
    # The other size class (when the problem has one): the same graph with other parameter shapes; ModelNew picks
    # the configuration whose init arguments it is given. Built on the meta device: no memory, no kernels run.
    if method == "fx" and sizes:
        other = None if size_class == "cpu" else "cpu"
        try:
            _apply_size_class(module, originals, other)
            torch.manual_seed(0)
            init2 = list(module.get_init_inputs())
            with torch.device("meta"):
                model2 = module.Model(*init2)
            gm2 = torch.fx.symbolic_trace(model2)
            if graph_signature(gm2) == graph_signature(gm) and init_encoding(init2) is not None:
                configs.append(_config(other or "gpu", init2, model2, describe_modules(model2)))
            else:
                notes.append(f"the {other or 'gpu'} size class traces to a different graph; this candidate supports "
                             f"only the {size_class or 'gpu'} size class")
        except Exception as e:  # noqa: BLE001 - best effort
            notes.append(f"could not describe the {other or 'gpu'} size class: {type(e).__name__}: {e}")
        finally:
            _apply_size_class(module, originals, size_class)
    return {"ok": True, "method": method, "size_class": size_class or "gpu", "init_args": init_encoding(init),
            "nodes": nodes, "modules": modules, "configs": configs, "notes": notes,
            "training": bool(model.training)}
