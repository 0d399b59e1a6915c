"""The CUDA dialect of the shared C-family writer (`cfamily.CWriter`): row offsets from the host's (n, s) pairs, and
4-element vector loads and stores (float4; bf16/fp16 as 8 bytes widened to a float4, or kept packed in a uint2;
4 bools) with the bodies of the loops that use them."""

from __future__ import annotations

from .rowcache import VALIGN, VTYPE
from ..cfamily import CUDA, CWriter


class CudaWriter(CWriter):
    dialect = CUDA

    def offset_setup(self, d) -> None:
        """Each strided operand's kf_fast pair, read from meta once per thread (meta: row dims, strides, pairs)."""
        base = self.plan.nl * (1 + len(self.general))
        for gi, si in enumerate(self.general):
            self.w(d, f"const long long kn{si} = meta[{base + 2 * gi}], ks{si} = meta[{base + 2 * gi + 1}];")

    def offset(self, s) -> str:
        if s.mode != "general":
            return super().offset(s)
        nl, gi = self.plan.nl, self.general.index(s.index)
        return f"kf_off(r, meta, meta + {nl} + {gi * nl}, {nl}, kn{s.index}, ks{s.index})"

    def loop_pragma(self, depth: int, reductions: list[str]) -> None:
        if self.sched.unroll:
            self.w(depth, "#pragma unroll 4")

    def vload(self, si: int, idx: str, packed: bool = False) -> str:
        """The float4 (four row elements from `idx * 4`) of slot `si`: one 16-byte load for float, one 8-byte load
        widened lane by lane for bf16/fp16 (kept as the loaded uint2 when `packed`)."""
        slot = self.plan.slots[si]
        # reused operands load with an L2 evict-last hint (CUDA_L2_KEEP)
        ctype, keep = slot.ctype, slot.reused
        if ctype == "float":
            vec = f"reinterpret_cast<const float4*>(p{si})"
            return f"kf_keep_f4({vec} + {idx})" if keep else f"{vec}[{idx}]"
        if ctype == "bool":
            return f"reinterpret_cast<const uchar4*>(p{si})[{idx}]"
        vec = f"reinterpret_cast<const uint2*>(p{si})"
        raw = f"kf_keep_u2({vec} + {idx})" if keep else f"{vec}[{idx}]"
        return raw if packed else self.widen(si, raw)

    def widen(self, si: int, packed: str) -> str:
        """The float4 of four bf16/fp16 elements of slot `si` held packed in a uint2."""
        return f"kf_ld4_{self.plan.slots[si].ctype[3:]}({packed})"

    def vstore(self, j: int, idx: str, value: str) -> str:
        dtype = self.plan.outputs[j].dtype
        if dtype == "float":
            return f"reinterpret_cast<float4*>(q{j})[{idx}] = {value};"
        return f"reinterpret_cast<uint2*>(q{j})[{idx}] = kf_st4_{dtype[3:]}({value});"

    def vec4_body(self, d, loop, load) -> None:
        """The body of a float4 loop at index c4: each slot's float4 from `load(slot)`, the loop's values per lane,
        reductions, and float4 stores of its outputs. A `cat` reads its pieces lane by lane at the lane's column."""
        for si in loop.slots:
            self.w(d, f"const {VTYPE[self.plan.slots[si].ctype]} X{si} = {load(si)};")
        for j in loop.outputs:
            self.w(d, f"float4 Y{j};")
        for i, lane in enumerate("xyzw"):
            self.w(d, "{")
            for si in loop.slots:
                if self.plan.slots[si].ctype == "bool":
                    self.w(d + 1, f"const bool x{si} = X{si}.{lane} != 0;")
                else:
                    self.w(d + 1, f"const float x{si} = X{si}.{lane};")
            self.compute(d + 1, loop, col=f"(c4 * 4 + {i})")
            self.reduce(d + 1, loop)
            for j in loop.outputs:
                self.w(d + 1, f"Y{j}.{lane} = {self.var(self.plan.outputs[j].node)};")
            self.w(d, "}")
        for j in loop.outputs:
            self.w(d, self.vstore(j, "c4", f"Y{j}"))

    @staticmethod
    def aligned(ptr: str, ctype: str) -> str:
        return f"(((unsigned long long){ptr}) & {VALIGN[ctype] - 1}) == 0"

    def vec4_ok(self, loop) -> str:
        """Condition under which a loop may use 4-element accesses: the row length is a multiple of 4 and every row
        pointer it reads or writes along the row is aligned for them (cat pieces are read per lane)."""
        ptrs = [(f"p{si}", self.plan.slots[si].ctype) for si in loop.slots]
        ptrs += [(f"q{j}", self.plan.outputs[j].dtype) for j in loop.outputs]
        if not ptrs or any(t not in VALIGN or (t == "bool" and p[0] == "q") for p, t in ptrs):
            return ""
        return " && ".join(["(cols & 3) == 0"] + [self.aligned(p, t) for p, t in ptrs])
