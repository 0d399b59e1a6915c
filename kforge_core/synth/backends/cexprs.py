"""Elementwise expression templates (C-family: C++, CUDA, Metal); the per-row loop structure they fill is
`plan.passes`.

Templates use `kf_exp`, `kf_log`, `kf_tanh`, `kf_erf`; each backend defines them (libm calls, or inline
polynomials that vectorize). Operands are always variable names or literals, so repeating `{0}` is safe.
"""

from __future__ import annotations

import math
import struct

from ..plan.plans import HALF_CTYPES, KernelPlan, KNode

C_TEMPLATES = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "neg": "(-{0})", "abs": "kf_fabs({0})", "exp": "kf_exp({0})", "exp2": "kf_exp({0} * 0.693147180559945309f)",
    "log": "kf_log({0})", "log2": "(kf_log({0}) * 1.44269504088896341f)",
    "log10": "(kf_log({0}) * 0.434294481903251828f)", "log1p": "kf_log1p({0})", "expm1": "kf_expm1({0})",
    "sqrt": "kf_sqrt({0})", "rsqrt": "(1.0f / kf_sqrt({0}))", "reciprocal": "(1.0f / {0})",
    "square": "({0} * {0})", "erf": "kf_erf({0})", "erfc": "(1.0f - kf_erf({0}))",
    "sin": "kf_sin({0})", "cos": "kf_cos({0})", "tan": "kf_tan({0})", "atan": "kf_atan({0})",
    "sinh": "kf_sinh({0})", "cosh": "kf_cosh({0})", "asin": "kf_asin({0})", "acos": "kf_acos({0})",
    "floor": "kf_floor({0})", "ceil": "kf_ceil({0})", "round": "kf_rint({0})", "trunc": "kf_trunc({0})",
    "frac": "({0} - kf_trunc({0}))", "sign": "(float)(({0} > 0.0f) - ({0} < 0.0f))",
    "sigmoid": "(1.0f / (1.0f + kf_exp(-{0})))", "tanh": "kf_tanh({0})",
    "relu": "({0} < 0.0f ? 0.0f : {0})", "relu6": "({0} < 0.0f ? 0.0f : ({0} > 6.0f ? 6.0f : {0}))",
    "silu": "({0} / (1.0f + kf_exp(-{0})))",
    "gelu": "(0.5f * {0} * (1.0f + kf_erf({0} * 0.707106781186547524f)))",
    "gelu_tanh": "(0.5f * {0} * (1.0f + kf_tanh(0.797884560802865356f * ({0} + 0.044715f * {0} * {0} * {0}))))",
    "mish": "({0} * kf_tanh({0} > 20.0f ? {0} : kf_log1p(kf_exp({0}))))",
    "hardsigmoid": "({0} <= -3.0f ? 0.0f : ({0} >= 3.0f ? 1.0f : {0} / 6.0f + 0.5f))",
    "hardswish": "({0} <= -3.0f ? 0.0f : ({0} >= 3.0f ? {0} : {0} * ({0} + 3.0f) / 6.0f))",
    "selu": "(1.05070098735548049f * ({0} > 0.0f ? {0} : 1.67326324235437728f * kf_expm1({0})))",
    "softsign": "({0} / (1.0f + kf_fabs({0})))",
    "leaky_relu": "({0} > 0.0f ? {0} : {0} * {slope})",
    "elu": "({0} > 0.0f ? {0} : {alpha} * kf_expm1({0}))",
    "celu": "({0} > 0.0f ? {0} : {alpha} * kf_expm1({0} / {alpha}))",
    "softplus": "({0} * {beta} > {threshold} ? {0} : kf_log1p(kf_exp({0} * {beta})) / {beta})",
    "threshold": "({0} > {threshold} ? {0} : {value})",
    "clamp_min": "({0} < {1} ? {1} : {0})", "clamp_max": "({0} > {1} ? {1} : {0})",
    "maximum": "(({0} > {1} || {0} != {0}) ? {0} : {1})", "minimum": "(({0} < {1} || {0} != {0}) ? {0} : {1})",
    "gt": "({0} > {1})", "lt": "({0} < {1})", "ge": "({0} >= {1})", "le": "({0} <= {1})", "eq": "({0} == {1})",
    "ne": "({0} != {1})", "logical_and": "({0} && {1})", "logical_or": "({0} || {1})", "logical_not": "(!{0})",
    "where": "({0} ? {1} : {2})", "lerp": "({0} + {2} * ({1} - {0}))",
    "cast": "({0})",  # values are floats in the kernels; a narrowing cast is the node's rounding (KNode.half)
    "fill": "({0})",  # zeros_like / full(...): the constant itself
}


def flit(v) -> str:
    """A C float literal for a Python number, exactly the float32 PyTorch would use."""
    if isinstance(v, bool):
        return "1.0f" if v else "0.0f"
    v = float(v)
    if math.isnan(v):
        return "NAN"
    try:
        f32 = struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:
        f32 = math.inf if v > 0 else -math.inf
    if math.isinf(f32):
        return "INFINITY" if f32 > 0 else "(-INFINITY)"
    text = repr(f32)
    if float(text) == f32 and struct.unpack("f", struct.pack("f", float(text)))[0] == f32 and "e" not in text:
        return text + ("f" if "." in text else ".0f")
    return f"{f32.hex()}f"


def pow_expr(a: str, e, e_is_const: bool) -> str:
    if e_is_const and not isinstance(e, bool):
        e = float(e)
        special = {2.0: f"({a} * {a})", 3.0: f"({a} * {a} * {a})", 1.0: f"({a})", 0.0: "1.0f",
                   0.5: f"kf_sqrt({a})", -0.5: f"(1.0f / kf_sqrt({a}))", -1.0: f"(1.0f / {a})",
                   -2.0: f"(1.0f / ({a} * {a}))"}
        if e in special:
            return special[e]
        return f"kf_pow({a}, {flit(e)})"
    return f"kf_pow({a}, {e})"


def node_expr(n: KNode, operand_code) -> str:
    """The C expression of a node; `operand_code(op)` renders one operand. A node whose PyTorch result is bf16/fp16
    is computed in float and rounded to that type (kept as a float holding the rounded value)."""
    if n.fn == "pow":
        base, ex = n.operands
        if ex[0] == "c":
            text = pow_expr(operand_code(base), ex[1], True)
        else:
            text = pow_expr(operand_code(base), operand_code(ex), False)
    else:
        tpl = C_TEMPLATES[n.fn]
        args = [operand_code(o) for o in n.operands]
        attrs = {k: flit(v) for k, v in n.attrs.items() if isinstance(v, (int, float))}
        text = tpl.format(*args, **attrs)
    return f"{HALF_ROUND[n.half]}({text})" if n.half else text


# ------------------------------------------------------------------------------- half-precision storage (C family)
# bf16/fp16 slots and outputs are stored as 16-bit words (`kf_bf16`/`kf_f16`, both `unsigned short`); loads widen
# them to float exactly, stores round to nearest even (NaN stays NaN), all by bit manipulation so the C++ and CUDA
# writers share it (no cuda_bf16.h under NVRTC). Each writer defines `kf_as_uint`/`kf_as_float` and the prefix.
HALF_ROUND = {"bfloat16": "kf_rbf16", "float16": "kf_rf16"}  # float -> float rounded to that type
_HALF_LOAD = {c: "kf_ld_" + c[3:] for c in HALF_CTYPES.values()}  # kf_bf16 -> kf_ld_bf16
_HALF_STORE = {c: "kf_st_" + c[3:] for c in HALF_CTYPES.values()}
# a writer may define KF_HW_BF16_BITS / KF_HW_F16_BITS / KF_HW_F16_FLOAT to hardware conversions (same results)
HALF_MATH = r"""
typedef unsigned short kf_bf16;
typedef unsigned short kf_f16;
KF_HALF_FN unsigned int kf_bf16_bits(float f) {
#ifdef KF_HW_BF16_BITS
    return KF_HW_BF16_BITS(f);
#else
    const unsigned int u = kf_as_uint(f);
    return (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}
KF_HALF_FN float kf_ld_bf16(kf_bf16 h) { return kf_as_float(((unsigned int)h) << 16); }
KF_HALF_FN kf_bf16 kf_st_bf16(float f) { return (kf_bf16)kf_bf16_bits(f); }
KF_HALF_FN float kf_rbf16(float f) { return kf_as_float(kf_bf16_bits(f) << 16); }
KF_HALF_FN unsigned int kf_f16_bits(float f) {
#ifdef KF_HW_F16_BITS
    return KF_HW_F16_BITS(f);
#else
    const unsigned int a = kf_as_uint(f);
    const unsigned int sign = (a >> 16) & 0x8000u;
    const unsigned int u = a & 0x7fffffffu;
    const unsigned int big = u > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN -> quiet NaN, >= 65520 -> inf
    const unsigned int sub = kf_as_uint(kf_as_float(u) + 0.5f) - 0x3f000000u;  // below 2^-14: the float add rounds
    const unsigned int nrm = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
    return (u >= 0x47800000u ? big : (u < 0x38800000u ? sub : nrm)) | sign;
#endif
}
KF_HALF_FN float kf_ld_f16(kf_f16 h) {
#ifdef KF_HW_F16_FLOAT
    return KF_HW_F16_FLOAT(h);
#else
    const unsigned int e = h & 0x7c00u;
    const unsigned int m = ((unsigned int)(h & 0x7fffu)) << 13;
    const float sub = kf_as_float(m + 0x38800000u) - 6.103515625e-05f;
    const float mag = e == 0x7c00u ? kf_as_float(m + 0x70000000u) : (e == 0u ? sub : kf_as_float(m + 0x38000000u));
    return kf_as_float(kf_as_uint(mag) | (((unsigned int)(h & 0x8000u)) << 16));
#endif
}
KF_HALF_FN kf_f16 kf_st_f16(float f) { return (kf_f16)kf_f16_bits(f); }
KF_HALF_FN float kf_rf16(float f) { return kf_ld_f16(kf_st_f16(f)); }
"""


def value_ctype(ctype: str) -> str:
    """The C type a slot's value has inside the kernel (half-precision storage widens to float)."""
    return "float" if ctype in _HALF_LOAD else ctype


def load(ctype: str, ref: str) -> str:
    fn = _HALF_LOAD.get(ctype)
    return f"{fn}({ref})" if fn else ref


def store(ctype: str, text: str) -> str:
    fn = _HALF_STORE.get(ctype)
    return f"{fn}({text})" if fn else text


def uses_half(plans: list) -> bool:
    nodes = [q for p in plans for n in p.nodes for q in [n] + [
        x for pc in (n.attrs["pieces"] if n.fn == "cat" else []) for x in pc["nodes"]]]
    return any(s.ctype in _HALF_LOAD for p in plans for s in p.slots) or any(
        o.dtype in _HALF_LOAD for p in plans for o in p.outputs) or any(n.half for n in nodes)


def half_math(plans: list, fn: str, bits: str) -> list[str]:
    """The half-precision helpers (with this writer's function prefix and bit casts) when some kernel needs them."""
    if not uses_half(plans):
        return []
    return [bits.strip(), HALF_MATH.replace("KF_HALF_FN", fn).strip()]


def cat_lines(n: KNode, plan: KernelPlan, var, operand, col: str = "c") -> list[tuple[int, str]]:
    """Statements [(extra depth, text)] computing a `cat` node at column `col`: only the piece the column falls in
    is evaluated, its row-varying slots read at `col - lo` (their own rows, `p<slot>`), so no read leaves a piece.
    `var(name)` names a node's variable, `operand(op)` renders the kernel's other operands."""
    out = [(0, f"float {var(n.name)};")]
    pieces = n.attrs["pieces"]
    for i, pc in enumerate(pieces):
        hi = pc["lo"] + pc["w"]
        head = "if" if i == 0 else "} else if"
        out.append((0, f"{head} ({col} < {hi}) {{" if i < len(pieces) - 1 else "} else {"))
        shifted = f"({col} - {pc['lo']})" if pc["lo"] else col

        def piece_operand(o, pc=pc, shifted=shifted):
            if o[0] == "slot":
                s = plan.slots[o[1]]
                if s.kind == "tensor" and s.inner == 1:
                    return load(s.ctype, f"p{s.index}[{shifted}]")
            return operand(o)

        for q in pc["nodes"]:
            out.append((1, f"const {q.dtype} {var(q.name)} = {node_expr(q, piece_operand)};"))
        out.append((1, f"{var(n.name)} = {piece_operand(pc['root'])};"))
    out.append((0, "}"))
    return out

