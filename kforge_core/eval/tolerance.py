"""Per-dtype tolerance policies. A verdict records the policy it was judged by.

An output passes when every element satisfies |got - want| <= atol + rtol * |want| and no element is NaN or Inf.
The relative L2 error ||got - want|| / ||want|| is held to `rel_l2_max` only for a *constant* output (every element
the same, zero included): where the reference's values are small next to atol, a zero or constant output passes
the element-wise bound whatever the answer. A varying output of that scale within the element-wise bound passes
(outputs around 1e-9 are often rounding noise, different in every correct kernel), and the verdict notes that the
check there was absolute. (harness/compare.py applies this.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    rel_l2_max: float


@dataclass(frozen=True)
class TolerancePolicy:
    name: str
    fp32: Tolerance
    half: Tolerance  # fp16 (the key verdicts have always recorded it under)
    bf16: Tolerance
    fp64: Tolerance

    def for_dtype(self, dtype_name: str) -> Tolerance:
        if dtype_name == "bfloat16":
            return self.bf16
        if dtype_name == "float16":
            return self.half
        if dtype_name == "float64":
            return self.fp64
        if dtype_name.startswith(("float", "complex")):
            return self.fp32
        return Tolerance(0.0, 0.0, 0.0)  # integers and booleans compare exactly

    def to_dict(self) -> dict:
        return {"name": self.name, **{k: asdict(getattr(self, k)) for k in ("fp32", "half", "bf16", "fp64")}}


# bf16 keeps 8 significant bits: one step is 2^-7 of the value just above a power of two. Two roundings in a chain
# (a norm's bf16 result, then its product with a bf16 weight) may each land one step from the reference's when the
# statistics were summed in another order, so a correct kernel can be two steps off: 1.56 % of the value there,
# more than rtol 1e-2 + atol 1e-2 for values in [2, 2.125) and [4, 5.25). rtol 1.6e-2 (torch.testing's default for
# bf16) covers two steps. fp16 keeps 11 bits, so 1e-2 already covers many steps.
POLICIES = {
    "default": TolerancePolicy("default", fp32=Tolerance(1e-4, 1e-4, 1e-3), half=Tolerance(1e-2, 1e-2, 2e-2),
                               bf16=Tolerance(1e-2, 1.6e-2, 2e-2), fp64=Tolerance(1e-7, 1e-7, 1e-6)),
    # KernelBench's own check (atol=rtol=1e-2 for every dtype); looser, offered for comparability.
    "kernelbench": TolerancePolicy("kernelbench", fp32=Tolerance(1e-2, 1e-2, 5e-2),
                                   half=Tolerance(1e-2, 1e-2, 5e-2), bf16=Tolerance(1e-2, 1e-2, 5e-2),
                                   fp64=Tolerance(1e-2, 1e-2, 5e-2)),
}


def get_policy(name: str) -> TolerancePolicy:
    from ..errors import UsageError

    if name not in POLICIES:
        raise UsageError(f"unknown tolerance policy {name!r}; choose one of {', '.join(POLICIES)}")
    return POLICIES[name]
