"""The backend-independent kernel plan: the data types every code generator reads.

A `ProgramPlan` is the lowered program's units in emission order: host-side `Py` items and `KernelPlan`s. A
`KernelPlan` describes one kernel over a row space (see `fusion`): its external operands (`Slot`), its nodes
(`KNode`, element-level or row-level), its outputs (`KOut`) and its reduction passes. Also here: how a tensor
dtype is stored in C (`storage_ctype`, `HALF_CTYPES`) and the plain translation of a primitive into a `KNode`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..lower.graph import Lowered, Prim

HALF_CTYPES = {"bfloat16": "kf_bf16", "float16": "kf_f16"}  # torch dtype -> C storage type (see exprs.HALF_MATH)


@dataclass
class Slot:
    """An external operand of a kernel."""

    index: int
    value: str  # value name
    kind: str  # "tensor" | "scalar" | "stat" (a per-row statistic the kernel computes itself: cuda_pipeline)
    ctype: str = "float"  # "float" | "bool" | "kf_bf16" | "kf_f16" (16-bit storage, read as float)
    inner: int = 1  # 1: varies along the row (stride 1), 0: one value per row
    mode: str = "rowmajor"  # "rowmajor" | "zero" (same for every row) | "general" (strides from meta)
    drop: bool = False  # indexed by the row only (a reduction result without keepdim)
    piece_w: int | None = None  # read by a `cat` piece: rows of this width, at column c - lo of the piece
    reused: bool = False  # a row operand broadcast over a row dim: other rows read the same elements again


@dataclass
class KNode:
    name: str
    fn: str
    operands: list  # ("slot", i) | ("node", name) | ("c", value) | ("cols", k) | ("col",)
    level: str  # "E" | "R"
    dtype: str  # "float" | "bool"
    attrs: dict = field(default_factory=dict)
    red: dict | None = None  # {"op", "pass"}
    rpass: int = 0  # R-level: the pass after which the value is available; E-level: 0
    half: str = ""  # "bfloat16" | "float16": PyTorch's result has that dtype, so the float value is rounded to it


@dataclass
class KOut:
    node: str
    level: str
    drop: bool
    dtype: str  # C storage type, as Slot.ctype
    inplace_slot: int | None = None


@dataclass
class KernelPlan:
    name: str
    rank: int
    k: int
    slots: list[Slot]
    nodes: list[KNode]
    outputs: list[KOut]
    npasses: int  # number of reduction passes (0 for pointwise kernels)
    members: list[str]  # primitive names
    origins: list[str]  # traced nodes covered
    label: str
    shape_slots: list[int]  # tensor slots whose broadcast gives S at run time
    traced_cols: int = 0  # the row length at the traced size (run-time rows may differ; the kernels take any)
    pipeline: dict | None = None  # its row statistics computed in the same launch (rewrites.group_norm_pipeline)
    # {pass: (mean, squares reduction)}: variance passes a writer streaming the row may fold into their mean's
    # (rewrites.variance_fold)
    variance_folds: dict = field(default_factory=dict)

    @property
    def nl(self) -> int:
        return self.rank - self.k

    @property
    def row_slots(self) -> list[int]:
        """Tensor slots holding one value per row (loaded once per row, before the row's loops)."""
        return [s.index for s in self.slots if s.kind == "tensor" and s.inner == 0]


@dataclass
class ProgramPlan:
    units: list  # Py | KernelPlan, in emission order (a `ColOp` is a Py its writer launches as a column kernel)
    lowered: Lowered
    kernels: list[KernelPlan]

    @property
    def columns(self) -> list:
        """The column kernels (`lower.colops.ColOp`), in emission order."""
        return [u for u in self.units if getattr(u, "role", "") == "colk"]


def storage_ctype(dtype: str) -> str:
    """The C type a kernel reads or writes a tensor of this dtype as."""
    return "bool" if dtype == "bool" else HALF_CTYPES.get(dtype, "float")


def knode_of(p: Prim, ops: list, level: str, rpass: int = 0) -> KNode:
    return KNode(p.name, p.fn, ops, level, "bool" if p.dtype == "bool" else "float", dict(p.attrs), rpass=rpass,
                 half=p.dtype if p.dtype in HALF_CTYPES else "")

