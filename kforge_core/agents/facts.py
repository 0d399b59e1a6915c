"""How a candidate will be judged, as text for the agents: the sizes actually evaluated, the tolerance, the device.

A model that sees a gallery file's GPU sizes writes kernels for those, and one that is not told the tolerance or the
device guesses both. Everything here is read statically or from caches: no problem code runs, nothing is measured.
"""

from __future__ import annotations

import ast
from pathlib import Path

from ..eval import ceilings
from ..pyast import parse_ast
from ..eval.tolerance import get_policy

CPU_SIZES_NAME = "CPU_SIZES"
# CPU features worth naming to a kernel writer (from /proc/cpuinfo's flags / Features line).
_ISA_FLAGS = ("avx512f", "avx512bw", "avx512_bf16", "avx2", "fma", "f16c", "amx_tile", "asimd", "sve", "neon")


def evaluation_facts(problem_source: str, platform, size_class: str | None, tolerance: str) -> str:
    """Bullets: the evaluated sizes (when a size class overrides the file's), the tolerance, the device."""
    lines = []
    sizes = evaluated_sizes(problem_source, size_class)
    if sizes:
        shown = ", ".join(f"{k} = {v!r}" for k, v in sizes.items())
        lines.append(f"- Inputs are built at these sizes, not the ones written in the file above: {shown} "
                     f"(the file's {CPU_SIZES_NAME}; tune for these).")
    policy = get_policy(tolerance)
    lines.append(f"- Outputs must match the reference elementwise within |got - want| <= atol + rtol * |want|: "
                 f"float32 atol {policy.fp32.atol:g}, rtol {policy.fp32.rtol:g}; float16 atol {policy.half.atol:g}, "
                 f"rtol {policy.half.rtol:g}; bfloat16 atol {policy.bf16.atol:g}, rtol {policy.bf16.rtol:g}; "
                 "integers exactly. Keep float32 accumulation for float32 inputs (no float16 shortcuts).")
    lines.append(f"- Device: {device_facts(platform)}.")
    return "\n".join(lines)


def size_class_for(device_type: str) -> str | None:
    """The size class a problem is judged at on this kind of device when none is asked for: "cpu" on CPUs (a
    gallery file's own sizes are for GPUs), None (the file's sizes) elsewhere."""
    return "cpu" if device_type == "cpu" else None


def evaluated_sizes(problem_source: str, size_class: str | None) -> dict:
    """The globals a size class overrides ({} for the file's own sizes, or a problem without CPU_SIZES)."""
    if (size_class or "").strip().lower() != "cpu":
        return {}
    try:
        tree = parse_ast(problem_source)
    except (SyntaxError, ValueError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == CPU_SIZES_NAME
                                                for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return dict(value) if isinstance(value, dict) else {}
    return {}


def device_facts(platform) -> str:
    try:
        name = platform.device_name()
    except Exception:  # noqa: BLE001 - a device that cannot be named is still a device; say what we know
        name = platform.title
    parts = [name]
    if platform.device_type == "cpu":
        isa = cpu_features()
        if isa:
            parts.append("instruction sets: " + ", ".join(isa))
    measured = ceilings.cached(platform.name, name) or {}
    if measured.get("bandwidth_gbs"):
        parts.append(f"measured memory bandwidth {measured['bandwidth_gbs']:.3g} GB/s")
    for key, label in (("fp32_tflops", "fp32"), ("bf16_tflops", "bf16 tensor-core")):
        if measured.get(key):
            parts.append(f"measured {label} peak {measured[key]:.3g} TFLOP/s")
    return "; ".join(parts)


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return []
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return [f for f in _ISA_FLAGS if f in flags]
