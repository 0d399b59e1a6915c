"""The lowered form the synthesizer works with, and the exceptions that steer lowering.

A traced node becomes one or more items, in topological order:
- `Prim`: a primitive the kernels implement — an elementwise function (`pw`) or a row reduction (`red`: sum, mean,
  max, min over the trailing `k` dimensions). Composite operators (softmax, log_softmax, logsumexp, LayerNorm,
  RMSNorm, GroupNorm, F.normalize, var/std, eval-mode batch_norm, the losses) expand into several primitives that
  share an `origin` (GroupNorm with layout glue between them).
- `Py`: a node kept as a PyTorch call in `ModelNew.forward` — a matrix product through the vendor library (`lib`),
  layout/shape glue (`glue`: views, getitem, shape arithmetic; not counted), or an unsupported operator (`kept`).

`Lowered` bundles the items with the value facts (`Value`: shape, dtype, strides) the planners read.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field

FLOAT = "float32"
KERNEL_DTYPES = ("float32", "bool")


class Unsupported(Exception):
    """A node the kernels cannot implement (it stays a PyTorch call); the message says why."""


class CannotEmit(Exception):
    """A node that can neither be synthesized nor written as a public PyTorch call: no candidate is possible."""


@dataclass
class Value:
    kind: str  # "t" tensor, "s" Python scalar, "seq", "none", "other", "dtype"
    shape: tuple = ()
    dtype: str = ""
    strides: tuple | None = None
    contiguous: bool = True
    scalar: object = None

    @classmethod
    def from_desc(cls, d: dict | None) -> "Value":
        if not d:
            return cls("other")
        k = d.get("k")
        if k == "t":
            return cls("t", tuple(d["shape"]), d["dtype"], tuple(d["strides"]) if d.get("strides") else None,
                       bool(d.get("contiguous", True)))
        if k == "s":
            return cls("s", scalar=d.get("v"), dtype=d.get("type", ""))
        return cls(k or "other")

    @property
    def is_tensor(self) -> bool:
        return self.kind == "t"


@dataclass
class Prim:
    name: str
    fn: str  # elementwise function name, or "red"
    # ("v", name) | ("c", number) | ("cols", k): the row length minus k, as a float | ("col",): the element's
    # index in its row, as a float (attrs["row_k"]: the row width it is lowered for)
    operands: list
    shape: tuple
    dtype: str  # "float32" | "bool" | "bfloat16" | "float16" (a half dtype: computed in float32, then rounded)
    origin: str  # the traced node this came from
    attrs: dict = field(default_factory=dict)
    red: dict | None = None  # {"op": sum|mean|max|min, "k": int, "keepdim": bool, "in_shape": tuple}
    label: str = ""  # the user-facing operator name ("softmax", "gelu", ...)

    @property
    def deps(self) -> list[str]:
        return [o[1] for o in self.operands if o[0] == "v"]


@dataclass
class Py:
    name: str
    code: str  # Python expression over value names
    deps: list[str]
    value: Value
    role: str  # "lib" | "glue" | "kept" | "input" | "param" | "output"
    origin: str
    label: str = ""
    reason: str = ""  # why it is kept
    fresh: bool = False  # produces a new contiguous tensor nobody else holds (a matmul result): reusable in place


@dataclass
class Lowered:
    items: list  # Prim | Py in topological order
    values: dict  # name -> Value
    placeholders: list  # [(name, default_code | None)]
    output_code: str  # the forward's return expression
    output_names: list[str]
    counted: dict  # origin -> category: "kernel" | "lib" | "kept"
    labels: dict  # origin -> label
    kept_reasons: dict  # origin -> reason
    method: str
    notes: list[str]
    imports: set
    names: dict  # value name -> Python variable name in forward
    # composites whose statistics a writer may compute inside their consumer kernel (see cuda_pipeline):
    # {"kind": "group_norm", "x", "mean", "rstd", "mean_rows", "rstd_rows": value names, "per_row", "eps"}
    pipelines: list = field(default_factory=list)


def py_name(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    if not ident or ident[0].isdigit() or keyword.iskeyword(ident):
        ident = "v_" + ident
    return ident


def contig_strides(shape) -> tuple:
    """Row-major strides of a fresh contiguous tensor (a zero-size dim counts as 1, as in PyTorch)."""
    out, acc = [], 1
    for s in reversed(tuple(shape)):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))
