"""Constants made in forward: 0-dim tensors of a Python number and tensors filled with one.

- `torch.tensor(0.5)` (or `torch.tensor(v, device=x.device)`), and the `_tensor_constant<n>` attribute fx makes of
  one when nothing traced flows into it (the tracer records its value, `trace_nodes._scalar_constant`): a kernel
  reads the number as a literal (`operand` gives `("c", v)`), exactly what PyTorch computes, since a 0-dim tensor
  takes the other operand's dtype in an elementwise op as a Python number does. The tensor itself is still written
  for any PyTorch call that reads it, and dropped when nothing does (`prune_constants`), so it costs no allocation
  and pins no kernel intermediate (a `device=x.device` argument reads `x`).
- `zeros_like` / `ones_like` / `full_like` and `zeros` / `ones` / `full` of float32 that only a fused `cat` reads
  (level 1's exclusive cumsum: a zero column before the scan): a `fill` primitive in the cat's piece, so the
  kernel writes the constant and nothing is allocated. Anywhere else a fill stays the PyTorch allocation it is
  (glue, like `torch.empty`): a kernel of its own would have no operand to take its shape and device from, and
  a memset is no work for a kernel to win.
"""

from __future__ import annotations

from .args import Arg, render
from .ir import FLOAT, Prim, Py, Unsupported

FILLS = {"zeros_like": 0.0, "ones_like": 1.0, "full_like": None, "zeros": 0.0, "ones": 1.0, "full": None}
_NUMERIC = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")


def _number(a):
    """A Python number an encoded argument holds, else None."""
    if Arg.is_node(a):
        return None
    try:
        c = Arg.const(a)
    except Unsupported:
        return None
    return c if isinstance(c, (bool, int, float)) else None


class ConstantLowering:
    """Mixed into `Lowerer`: sets its `consts` (value name -> the number a 0-dim constant tensor holds)."""

    def _tensor_of_number(self, n: dict) -> None:
        """torch.tensor(number, dtype=..., device=...): a 0-dim constant; kept as the PyTorch call it was."""
        name, v = n["name"], self.values[n["name"]]
        args = n.get("args", [])
        c = _number(args[0]) if args else None
        if c is None or v.shape or v.dtype not in _NUMERIC:
            raise Unsupported("torch.tensor of anything but a number (a list, a traced value) stays in PyTorch")
        if Arg.const(n.get("kwargs", {}).get("requires_grad", False)) is True:
            raise Unsupported("torch.tensor(..., requires_grad=True) stays in PyTorch")
        self._py_call(n, "glue")
        self.consts[name] = c

    def _attr_constant(self, n: dict) -> bool:
        """A `_tensor_constant<n>` get_attr whose value the tracer recorded: written as `torch.tensor(v, dtype=)`
        (a 0-dim CPU tensor, which any device's PyTorch op takes). False when it is not one."""
        const = n.get("const")
        v = self.values[n["name"]]
        if not const or v.shape or const.get("dtype") not in _NUMERIC:
            return False
        c = _number(const.get("value"))
        if c is None:
            return False
        code = f"torch.tensor({render(const['value'], self.names, self.imports)}, dtype=torch.{const['dtype']})"
        self.items.append(Py(n["name"], code, [], v, "glue", n["name"]))
        self.consts[n["name"]] = c
        return True

    def _fill(self, n: dict, cname: str, b: dict) -> None:
        name, out = n["name"], self.values[n["name"]]
        if out.dtype != FLOAT or not self._only_in_cats(name):
            self._py_call(n, "glue")
            return
        value = FILLS[cname]
        if value is None:
            a = b.get("fill_value", b.get("arg1"))  # full(size, v) / full_like(x, v), positional or not
            value = _number(a) if a is not None else None
            if value is None:
                self._py_call(n, "glue")
                return
        self.items.append(Prim(name, "fill", [("c", value)], tuple(out.shape), FLOAT, name, label=cname))
        self.counted[name] = "kernel"

    def _only_in_cats(self, name: str) -> bool:
        """Whether only `cat`s read `name`, this writer fuses them, and each has a piece that is not a fill (its
        kernel takes its shape and device from that piece)."""
        users = [self.by_name[u] for u in self.users.get(name, []) if u in self.by_name]
        if not users or not self.fuse_cat:
            return False
        for u in users:
            if str(u["target"]).rpartition(".")[2] != "cat":
                return False
            others = [self.by_name.get(r, {}) for r in self._refs(u) if r != name]
            if not any(str(o.get("target", "")).rpartition(".")[2] not in FILLS for o in others):
                return False
        return True


def prune_constants(items: list, consts: dict, outputs: list) -> list:
    """`items` without the constants' PyTorch calls nothing reads any more (their operands became literals), nor
    the glue only those calls read (the `x.device` of `torch.tensor(v, device=x.device)`)."""
    items = list(items)
    candidates = set(consts)
    while True:
        read = {d for it in items for d in it.deps} | set(outputs)
        dead = {it.name for it in items if isinstance(it, Py) and it.role == "glue" and it.name in candidates
                and it.name not in read}
        if not dead:
            return items
        for it in items:
            if it.name in dead:
                candidates |= set(it.deps)
        items = [it for it in items if it.name not in dead]
