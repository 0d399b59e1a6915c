"""Triton expression templates: PyTorch's elementwise functions as `triton.language` expressions over operand
texts (the Triton counterpart of `cexprs`), shared by the row/elementwise kernel writer (`triton`) and the column
and window kernels' fused chains (`col_chains`)."""

from __future__ import annotations

from .cexprs import flit

TRITON_TEMPLATES = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})", "neg": "(-{0})",
    "abs": "tl.abs({0})", "exp": "tl.exp({0})", "exp2": "tl.exp2({0})", "log": "tl.log({0})",
    "log2": "tl.log2({0})", "log10": "(tl.log({0}) * 0.4342944819032518)", "log1p": "tl.log(1.0 + {0})",
    "expm1": "(tl.exp({0}) - 1.0)", "sqrt": "tl.sqrt({0})", "rsqrt": "tl.rsqrt({0})", "reciprocal": "(1.0 / {0})",
    "square": "({0} * {0})", "erf": "tl.erf({0})", "erfc": "(1.0 - tl.erf({0}))", "sin": "tl.sin({0})",
    "cos": "tl.cos({0})", "floor": "tl.floor({0})", "ceil": "tl.ceil({0})", "sigmoid": "tl.sigmoid({0})",
    "tanh": "(2.0 * tl.sigmoid(2.0 * {0}) - 1.0)", "relu": "tl.where({0} < 0.0, 0.0, {0})",
    "relu6": "tl.where({0} < 0.0, 0.0, tl.where({0} > 6.0, 6.0, {0}))", "silu": "({0} * tl.sigmoid({0}))",
    "gelu": "(0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476)))",
    "gelu_tanh": "(0.5 * {0} * (2.0 * tl.sigmoid(1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0}))))",
    "mish": "({0} * (2.0 * tl.sigmoid(2.0 * tl.where({0} > 20.0, {0}, tl.log(1.0 + tl.exp({0})))) - 1.0))",
    "hardsigmoid": "tl.where({0} <= -3.0, 0.0, tl.where({0} >= 3.0, 1.0, {0} / 6.0 + 0.5))",
    "hardswish": "tl.where({0} <= -3.0, 0.0, tl.where({0} >= 3.0, {0}, {0} * ({0} + 3.0) / 6.0))",
    "selu": "(1.0507009873554805 * tl.where({0} > 0.0, {0}, 1.6732632423543772 * (tl.exp({0}) - 1.0)))",
    "softsign": "({0} / (1.0 + tl.abs({0})))",
    "leaky_relu": "tl.where({0} > 0.0, {0}, {0} * {slope})",
    "elu": "tl.where({0} > 0.0, {0}, {alpha} * (tl.exp({0}) - 1.0))",
    "celu": "tl.where({0} > 0.0, {0}, {alpha} * (tl.exp({0} / {alpha}) - 1.0))",
    "softplus": "tl.where({0} * {beta} > {threshold}, {0}, tl.log(1.0 + tl.exp({0} * {beta})) / {beta})",
    "threshold": "tl.where({0} > {threshold}, {0}, {value})",
    "clamp_min": "tl.where({0} < {1}, {1}, {0})", "clamp_max": "tl.where({0} > {1}, {1}, {0})",
    "maximum": "tl.where(({0} > {1}) | ({0} != {0}), {0}, {1})",
    "minimum": "tl.where(({0} < {1}) | ({0} != {0}), {0}, {1})",
    "gt": "({0} > {1})", "lt": "({0} < {1})", "ge": "({0} >= {1})", "le": "({0} <= {1})", "eq": "({0} == {1})",
    "ne": "({0} != {1})", "logical_and": "(({0} != 0) & ({1} != 0))", "logical_or": "(({0} != 0) | ({1} != 0))",
    "logical_not": "({0} == 0)", "where": "tl.where({0}, {1}, {2})", "lerp": "({0} + {2} * ({1} - {0}))",
}


class TritonUnsupported(Exception):
    pass


def plit(v) -> str:
    """A Triton (Python) float literal for a Python number, the float32 PyTorch would use."""
    if isinstance(v, bool):
        return "1.0" if v else "0.0"
    s = flit(v)
    if s in ("INFINITY", "(-INFINITY)", "NAN"):
        return {"INFINITY": "float('inf')", "(-INFINITY)": "float('-inf')", "NAN": "float('nan')"}[s]
    if s.startswith("0x") or s.startswith("-0x"):
        return repr(float.fromhex(s[:-1]))
    return s[:-1]


def _int_power(a: str, e: int) -> str:
    """a ** e for a small integer e by repeated squaring, written out (exact as PyTorch's integer powers)."""
    if e == 0:
        return "1.0"
    if e < 0:
        return f"(1.0 / {_int_power(a, -e)})"
    if e == 1:
        return f"({a})"
    half = _int_power(a, e // 2)
    sq = f"({half} * {half})"
    return f"({sq} * {a})" if e % 2 else sq


def triton_pow(a: str, ex: tuple, operand) -> str:
    """PyTorch's pow in Triton (no pow in tl): small integer constants by multiplication; anything else as
    exp2(e * log2|a|) with pow's rules for the rest: e == 0 gives 1 (even for NaN), a negative base keeps the sign
    of an odd integer exponent and is NaN for a non-integer one."""
    if ex[0] == "c" and not isinstance(ex[1], bool):
        e = float(ex[1])
        special = {2.0: f"({a} * {a})", 3.0: f"({a} * {a} * {a})", 1.0: f"({a})", 0.0: "1.0",
                   0.5: f"tl.sqrt({a})", -0.5: f"tl.rsqrt({a})", -1.0: f"(1.0 / {a})",
                   -2.0: f"(1.0 / ({a} * {a}))"}
        if e in special:
            return special[e]
        if e == int(e) and abs(e) <= 64:
            return _int_power(a, int(e))
        mag = f"tl.exp2({plit(e)} * tl.log2(tl.abs({a})))"
        if e != int(e):
            return f"tl.where({a} < 0.0, float('nan'), {mag})"
        return f"tl.where(({a} < 0.0) | (1.0 / {a} < 0.0), -{mag}, {mag})" if int(e) % 2 else mag
    e = operand(ex)
    mag = f"tl.exp2({e} * tl.log2(tl.abs({a})))"
    whole = f"(tl.floor({e}) == {e})"
    odd = f"({whole} & (tl.floor({e} * 0.5) * 2.0 != {e}))"
    signed = f"(({a} < 0.0) | (1.0 / {a} < 0.0))"  # -0.0 too: an odd power keeps its sign
    return (f"tl.where(({e} == 0.0) | ({a} == 1.0), 1.0, tl.where({odd} & {signed}, -{mag}, "
            f"tl.where(({a} < 0.0) & ~{whole}, float('nan'), {mag})))")


def triton_expr(n, operand) -> str:
    if n.fn == "pow":
        base, ex = n.operands
        return triton_pow(operand(base), ex, operand)
    if n.fn not in TRITON_TEMPLATES:
        raise TritonUnsupported(f"{n.fn} has no Triton template")
    attrs = {k: plit(v) for k, v in n.attrs.items() if isinstance(v, (int, float))}
    return TRITON_TEMPLATES[n.fn].format(*[operand(o) for o in n.operands], **attrs)
