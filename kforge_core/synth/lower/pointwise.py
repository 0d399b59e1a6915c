"""Lowering elementwise operators (activations, arithmetic, comparisons, clamps, where, lerp, addcmul) to `Prim`s.

Operators with extra parameters become several primitives (hardtanh: clamp_min then clamp_max; add with alpha:
a scaling mul then the add); the intermediate values get synthetic names.
"""

from __future__ import annotations

import math
import struct

from .args import Arg
from .ir import FLOAT, KERNEL_DTYPES, Prim, Unsupported, Value
from .operators import COMPARE, UNARY


def _round_to(c, dtype: str):
    """A Python number as PyTorch converts it to a tensor's bf16/fp16 dtype: to float32, then round to nearest
    even (bools stay bools)."""
    if isinstance(c, bool) or math.isnan(float(c)):
        return c
    try:
        f32 = struct.unpack("<f", struct.pack("<f", float(c)))[0]
    except OverflowError:
        return math.copysign(math.inf, float(c))
    if dtype == "float16":
        try:
            return struct.unpack("<e", struct.pack("<e", f32))[0]
        except OverflowError:
            return math.copysign(math.inf, f32)
    u = struct.unpack("<I", struct.pack("<f", f32))[0]
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


class PointwiseLowering:
    """Mixed into `Lowerer`: uses its `values`, `items`, `counted`, `syn` and `operand`."""

    def _pointwise(self, n: dict, cname: str, b: dict) -> None:
        name = n["name"]
        out = self.values[name]
        if out.dtype not in KERNEL_DTYPES + self.halves:
            raise Unsupported(f"output dtype {out.dtype} (this target's kernels write "
                              f"{', '.join(KERNEL_DTYPES[:1] + self.halves)} and bool)")
        refs = [self.aliases.get(r, r) for r in self._refs(n)]
        if self.halves and any(r in self.consts for r in refs) and any(
                self.values[r].dtype in self.halves for r in refs + [name] if self.values[r].is_tensor):
            # PyTorch casts a 0-dim tensor to the half dtype first, unlike a Python number in mul/div
            raise Unsupported(f"a 0-dim constant tensor in a half-precision {cname} stays in PyTorch")
        prims = self._pw_prims(name, cname, b, out)
        if any(self.values[d].dtype in self.halves for p in prims for d in p.deps):
            prims = self._half_prims(name, cname, b, prims)
        for p in prims:
            p.origin = name
            p.label = p.label or cname
            self.items.append(p)
        self.counted[name] = "kernel"

    def _half_prims(self, name: str, cname: str, b: dict, prims: list[Prim]) -> list[Prim]:
        """PyTorch's semantics for an operator over bf16/fp16 tensors: it computes in float32 and rounds the result
        once (the last primitive; the node's own intermediates stay float32), so a `Prim` of a half dtype is
        rounded to it. Python-number operands of add/sub and of comparisons are first rounded to the tensors' dtype
        (mul/div keep them in float32, as PyTorch does). Where PyTorch does otherwise, the operator stays in it."""
        own = {p.name for p in prims}
        ext = [self.values[d] for p in prims for d in p.deps if d not in own]
        halves = {v.dtype for v in ext if v.dtype in self.halves}
        if len(halves) > 1:
            raise Unsupported(f"{cname} mixing {' and '.join(sorted(halves))} stays in PyTorch")
        half = halves.pop()
        if any(v.is_tensor and v.dtype == FLOAT and not v.shape for v in ext):
            raise Unsupported(f"a float32 0-dim tensor in a {half} operator is first cast to {half}; it stays in "
                              f"PyTorch")
        if len(prims) > 1 and cname in ("add", "sub", "rsub"):
            raise Unsupported(f"{cname} with alpha on {half} stays in PyTorch (it rounds differently)")
        if cname in ("add", "sub", "rsub") or cname in COMPARE:
            if any(not v.is_tensor for v in ext):
                raise Unsupported(f"a Python number read at run time in a {half} {cname} stays in PyTorch")
            for p in prims:
                p.operands = [("c", _round_to(o[1], half)) if o[0] == "c" else o for o in p.operands]
        for p in prims[:-1]:
            if p.dtype in self.halves:
                p.dtype = FLOAT
                self.values[p.name] = Value("t", p.shape, FLOAT, self.values[p.name].strides, True)
        return prims

    def _cat(self, n: dict, b: dict) -> None:
        """`torch.cat` along the last dimension becomes one `cat` primitive: column c of the output is piece i at
        column c - lo_i. Each piece is its operand's elementwise expression (the primitives only the cat reads, pulled
        out of the item list) over external values read at the piece's width; the kernel evaluates only the piece a
        column falls in. Anything else (another dim, an empty or non-float piece, a writer without it) stays in
        PyTorch."""
        name = n["name"]
        out = self.values[name]
        if not self.fuse_cat:
            raise Unsupported("this target's kernel writer does not fuse cat")
        rank = len(out.shape)
        dim = Arg.const(b.get("dim", 0))
        if not isinstance(dim, int) or rank == 0 or dim % rank != rank - 1:
            raise Unsupported("cat along a dimension other than the last stays in PyTorch")
        seq = b.get("input") or b.get("tensors")
        refs = seq.get("tuple", seq.get("list")) if isinstance(seq, dict) else seq
        if out.dtype != FLOAT or not isinstance(refs, list) or len(refs) < 2 or not all(Arg.is_node(r) for r in refs):
            raise Unsupported("cat of fewer than two float32 tensors")
        lead = tuple(out.shape[:-1])
        pieces, lo = [], 0
        for r in refs:
            v = self.val(r)
            if not v.is_tensor or v.dtype != FLOAT or len(v.shape) != rank or tuple(v.shape[:-1]) != lead \
                    or v.shape[-1] < 1:
                raise Unsupported("cat pieces must be non-empty float32 tensors of the output's rank and rows")
            pieces.append({"lo": lo, "w": int(v.shape[-1]), "shape": lead + (int(v.shape[-1]),),
                           "root": self.tensor_operand(r, "a cat piece"), "prims": []})
            lo += int(v.shape[-1])
        pulled = self._cat_pull(name, pieces)
        leaves = []
        for pc in pieces:
            for q in pc["prims"]:
                for o in q.operands:
                    if o[0] == "v" and o[1] not in pulled and o not in leaves:
                        leaves.append(o)
            if pc["root"][1] not in pulled and pc["root"] not in leaves:
                leaves.append(pc["root"])
        self.items = [it for it in self.items if it.name not in pulled]
        self.items.append(Prim(name, "cat", leaves, out.shape, FLOAT, name, {"pieces": pieces}, label="cat"))
        self.counted[name] = "kernel"

    def _cat_pull(self, cat: str, pieces: list) -> set:
        """Move into each piece the elementwise primitives that only the cat (through that piece) reads."""
        prims = {it.name: it for it in self.items if isinstance(it, Prim)}
        readers: dict[str, set] = {}
        for it in self.items:
            for d in it.deps:
                readers.setdefault(d, set()).add(it.name)
        for r in [p["root"][1] for p in pieces]:
            readers.setdefault(r, set()).add(cat)
        roots = [p["root"][1] for p in pieces]
        pulled: set = set()
        for pc in pieces:
            mine: set = set()
            stack = [pc["root"][1]] if roots.count(pc["root"][1]) == 1 else []
            while stack:
                v = stack.pop()
                q = prims.get(v)
                if q is None or v in mine or v in pulled or q.fn in ("red", "cat") or \
                        any(o[0] in ("cols", "col") for o in q.operands):
                    continue
                users = readers.get(v, set()) | {u for u in self.users.get(v, []) if u != cat}
                inside = mine | ({cat} if v == pc["root"][1] else set())
                fits = len(q.shape) <= len(pc["shape"]) and all(
                    a in (1, s) for a, s in zip(reversed(q.shape), reversed(pc["shape"])))
                if not users <= inside or not fits:
                    continue
                mine.add(v)
                stack.extend(q.deps)
            pc["prims"] = [it for it in self.items if it.name in mine]
            pulled |= mine
        return pulled

    def _pw_prims(self, name: str, cname: str, b: dict, out: Value) -> list[Prim]:
        shape = out.shape
        want_bool = cname in COMPARE
        if (out.dtype == "bool") != want_bool:
            raise Unsupported(f"{cname} producing {out.dtype}")
        dt = out.dtype

        def P(fn, ops, nm=None, **attrs):
            return Prim(nm or name, fn, ops, shape, dt, name, attrs)

        x = b.get("input")
        if cname == "identity":
            raise Unsupported("identity")
        if cname in UNARY:
            return [P(cname, [self.operand(x)])]
        if cname == "gelu":
            approx = b.get("approximate", "none")
            if approx not in ("none", "tanh"):
                raise Unsupported(f"gelu approximate={approx!r}")
            return [P("gelu_tanh" if approx == "tanh" else "gelu", [self.operand(x)])]
        if cname in ("leaky_relu",):
            return [P("leaky_relu", [self.operand(x)], slope=float(Arg.const(b.get("negative_slope", 0.01))))]
        if cname in ("elu", "celu"):
            return [P(cname, [self.operand(x)], alpha=float(Arg.const(b.get("alpha", 1.0))))]
        if cname == "softplus":
            return [P("softplus", [self.operand(x)], beta=float(Arg.const(b.get("beta", 1.0))),
                      threshold=float(Arg.const(b.get("threshold", 20.0))))]
        if cname == "threshold":
            return [P("threshold", [self.operand(x)], threshold=float(Arg.const(b["threshold"])),
                      value=float(Arg.const(b["value"])))]
        if cname == "hardtanh":
            lo, hi = Arg.const(b.get("min_val", -1.0)), Arg.const(b.get("max_val", 1.0))
            t = self.syn(name + "_lo")
            self.values[t] = out
            return [P("clamp_min", [self.operand(x), ("c", lo)], nm=t), P("clamp_max", [("v", t), ("c", hi)])]
        if cname in ("clamp", "clamp_min", "clamp_max"):
            lo = b.get("min") if cname != "clamp_max" else None
            hi = b.get("max") if cname != "clamp_min" else None
            lo = None if lo is None or lo == {"n": None} else lo
            hi = None if hi is None or hi == {"n": None} else hi
            if lo is None and hi is None:
                raise Unsupported("clamp without bounds")
            if lo is not None and hi is not None:
                t = self.syn(name + "_lo")
                self.values[t] = out
                return [P("clamp_min", [self.operand(x), self.operand(lo)], nm=t),
                        P("clamp_max", [("v", t), self.operand(hi)])]
            if lo is not None:
                return [P("clamp_min", [self.operand(x), self.operand(lo)])]
            return [P("clamp_max", [self.operand(x), self.operand(hi)])]
        if cname in ("add", "sub", "rsub"):
            a, o = self.operand(x), self.operand(b.get("other"))
            alpha = Arg.const(b.get("alpha", 1)) if b.get("alpha") is not None else 1
            if alpha != 1:
                t = self.syn(name + "_alpha")
                self.values[t] = out
                scaled = P("mul", [o if cname != "rsub" else a, ("c", alpha)], nm=t)
                if cname == "rsub":
                    return [scaled, P("sub", [o, ("v", t)])]
                return [scaled, P(cname, [a, ("v", t)])]
            if cname == "rsub":
                return [P("sub", [o, a])]
            return [P(cname, [a, o])]
        if cname == "div":
            if b.get("rounding_mode") not in (None,):
                raise Unsupported(f"div rounding_mode={b.get('rounding_mode')!r}")
            return [P("div", [self.operand(x), self.operand(b.get("other"))])]
        if cname in ("mul", "maximum", "minimum") or cname in COMPARE:
            if cname == "logical_not":
                return [P(cname, [self.operand(x)])]
            return [P(cname, [self.operand(x), self.operand(b.get("other"))])]
        if cname in ("pow", "float_power"):
            if cname == "float_power":
                raise Unsupported("float_power computes in float64")
            if x is None or b.get("exponent") is None:
                raise Unsupported("pow without a base and an exponent")
            base, ex = self.operand(x), self.operand(b.get("exponent"))
            return [P("pow", [base, ex])]
        if cname == "where":
            cond = self.operand(b.get("condition"))
            if cond[0] == "v" and self.values[cond[1]].kind == "t" and self.values[cond[1]].dtype != "bool":
                raise Unsupported("where with a non-bool condition")
            return [P("where", [cond, self.operand(x), self.operand(b.get("other"))])]
        if cname == "lerp":
            return [P("lerp", [self.operand(x), self.operand(b.get("end")), self.operand(b.get("weight"))])]
        if cname == "addcmul":
            t = self.syn(name + "_prod")
            self.values[t] = out
            v = Arg.const(b.get("value", 1))
            ops = [P("mul", [self.operand(b["tensor1"]), self.operand(b["tensor2"])], nm=t)]
            if v != 1:
                t2 = self.syn(name + "_scaled")
                self.values[t2] = out
                ops.append(P("mul", [("v", t), ("c", v)], nm=t2))
                t = t2
            return ops + [P("add", [self.operand(x), ("v", t)])]
        raise Unsupported(f"no kernel template for {cname}")
