"""Write CPU-sized copies of a KernelBench checkout's problems, for measuring on a small CPU.

    python scripts/kernelbench_cpu.py /path/to/KernelBench OUT_DIR [--levels 1,2] [--only NAME ...]

KernelBench sizes its problems for a data-centre GPU (inputs of several GiB, GEMMs of 10^11 flops); on a 2-core
CPU one evaluation would take hours. Each copy keeps the file as it is -- the same operators, the same structure,
the same text -- except the integer sizes assigned at module level (`batch_size = 4096`, `dim = 16384 * 2`,
`depth, height, width = 24, 48, 48`, `input_shape = (32768,)`), which are halved until one forward pass is small:

* a size is a module-level integer above 16 whose name is not structural (kernel, stride, padding, dilation,
  groups, heads, pool): kernel sizes, strides, axes and group counts keep their values, so the shape relations
  between them and the sizes stay valid (halving keeps a size divisible by the small powers of two that group
  counts and strides divide);
* the largest size (with every size equal to it: files rely on such equalities, e.g. a LayerNorm over the
  channel count applied to the last spatial dimension) is halved (never below 4) until the forward pass, run on
  the `meta` device, touches at most ELEMENTS tensor elements (inputs, parameters, outputs) and counts at most
  FLOPS floating-point operations;
* the copy is then run for real on the CPU (one thread): it must build, run and take at most `--max-ms`; when it
  fails at the smallest budget (a size that a hard-coded number in `forward` depends on), the budgets are
  relaxed 4x and 16x, then every size is halved together (keeping all their ratios, for a relation between
  two different sizes such as `W * stride == out_channels`), before the problem is left out with its reason.

Writes OUT_DIR/level1/..., OUT_DIR/level2/... (KernelBench's layout, so `bench --suite OUT_DIR` reads it) and
OUT_DIR/sizes.json: per problem the sizes changed (old -> new), the elements, flops and measured forward time, or
why it was left out. KernelBench's files are read, never changed; keep OUT_DIR outside this repository.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import time
from pathlib import Path

ELEMENTS = 1 << 18  # ~1 MiB of float32 per problem's live tensors
FLOPS = 5e7
SIZE_ABOVE = 16  # a module-level integer above this is a size (at or below: a kernel size, an axis, a count)
MIN_SIZE = 4  # halving stops here
STRUCTURAL = re.compile(r"kernel|stride|pad|dilation|group|head|pool|axis|reduce_dim", re.I)


def _const_int(node: ast.AST) -> int | None:
    """The value of an integer constant expression (`4096`, `16384 * 2`); None for anything else."""
    try:
        value = ast.literal_eval(node) if isinstance(node, ast.Constant) else eval(  # noqa: S307 - constants only
            compile(ast.Expression(node), "<size>", "eval"), {"__builtins__": {}}, {})
    except Exception:  # noqa: BLE001 - not a constant expression
        return None
    if not all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Expression))
               for n in ast.walk(node)):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def find_sizes(source: str) -> list[tuple[str, ast.AST, int]]:
    """(name, literal node, value) for each shrinkable size assigned at module level, in file order."""
    found = []
    for stmt in ast.parse(source).body:
        if not isinstance(stmt, ast.Assign):
            continue
        target, value = stmt.targets[0], stmt.value
        if len(stmt.targets) > 1:  # `height = width = 128`: one literal, shrunk once for all its names
            if not all(isinstance(t, ast.Name) for t in stmt.targets):
                continue
            target = ast.Name(id="=".join(t.id for t in stmt.targets))
        pairs: list[tuple[str, ast.AST]] = []
        if isinstance(target, ast.Name) and isinstance(value, ast.Tuple):
            pairs = [(f"{target.id}[{i}]", v) for i, v in enumerate(value.elts)]
            name_of = target.id
        elif isinstance(target, ast.Name):
            pairs, name_of = [(target.id, value)], target.id
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            pairs = [(t.id, v) for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name)]
            name_of = ""
        for name, node in pairs:
            if STRUCTURAL.search(name_of or name):
                continue
            n = _const_int(node)
            if n is not None and n > SIZE_ABOVE:
                found.append((name, node, n))
    return found


def rewrite(source: str, sizes: list[tuple[str, ast.AST, int]], new: dict[str, int]) -> str:
    """`source` with each size's literal replaced by its new value (everything else byte for byte)."""
    lines = source.splitlines(keepends=True)
    for name, node, _ in sorted(sizes, key=lambda s: (s[1].lineno, s[1].col_offset), reverse=True):
        if name not in new:
            continue
        i = node.lineno - 1
        if node.end_lineno != node.lineno:
            raise ValueError(f"size {name} spans several lines")
        line = lines[i]
        # ast offsets count UTF-8 bytes
        raw = line.encode()
        raw = raw[:node.col_offset] + str(new[name]).encode() + raw[node.end_col_offset:]
        lines[i] = raw.decode()
    return "".join(lines)


def _load(source: str, name: str) -> dict:
    namespace: dict = {"__name__": "kernelbench_cpu_" + re.sub(r"\W", "_", name)}
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 - KernelBench's own problem files
    return namespace


def meta_cost(source: str, name: str) -> tuple[int, float]:
    """(elements, flops) of one forward pass at the file's sizes, without allocating (the `meta` device)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    ns = _load(source, name)
    with torch.device("meta"):
        init = ns["get_init_inputs"]()
        model = ns["Model"](*init)
        inputs = ns["get_inputs"]()
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            out = model(*inputs)
    outs = out if isinstance(out, (tuple, list)) else [out]
    tensors = [t for t in [*inputs, *outs, *model.parameters(), *model.buffers()] if isinstance(t, torch.Tensor)]
    return sum(t.numel() for t in tensors), float(counter.get_total_flops())


def real_forward_ms(source: str, name: str) -> float:
    """One real forward on the CPU (after one warm-up), in milliseconds."""
    import torch

    ns = _load(source, name)
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]())
    inputs = ns["get_inputs"]()
    with torch.no_grad():
        model(*inputs)
        t0 = time.perf_counter()
        model(*inputs)
    return (time.perf_counter() - t0) * 1e3


def shrink(source: str, name: str, elements: float, flops: float, uniform: bool = False) -> tuple[str, dict]:
    sizes = find_sizes(source)
    new = {n: v for n, _, v in sizes}
    while True:
        text = rewrite(source, sizes, new)
        n_el, n_fl = meta_cost(text, name)
        if n_el <= elements and n_fl <= flops:
            return text, {"elements": n_el, "flops": n_fl, "sizes": new}
        shrinkable = [n for n, v in new.items() if v // 2 >= MIN_SIZE]
        if not shrinkable:
            return text, {"elements": n_el, "flops": n_fl, "sizes": new,
                          "note": "every size at its floor; still above budget"}
        top = max(new[n] for n in shrinkable)
        for n in shrinkable:  # equal sizes shrink together: problems rely on such equalities (B == D, C == W)
            if new[n] == top or uniform:
                new[n] //= 2


def convert(path: Path, max_ms: float) -> tuple[str | None, dict]:
    source = path.read_text()
    name = f"{path.parent.name}/{path.stem}"
    sizes = {n: v for n, _, v in find_sizes(source)}
    errors = []
    for relax, uniform in ((1, False), (4, False), (16, False), (1, True), (16, True)):
        try:
            text, info = shrink(source, name, ELEMENTS * relax, FLOPS * relax, uniform)
            ms = real_forward_ms(text, name)
        except Exception as e:  # noqa: BLE001 - a problem that cannot be sized is reported, not fatal
            errors.append(f"budget x{relax}{' uniform' if uniform else ''}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200] if str(e) else ''}")
            continue
        if ms > max_ms and relax < 16:
            errors.append(f"budget x{relax}: forward took {ms:.0f} ms")
            continue
        info["uniform"] = uniform
        new = info.pop("sizes")
        changed = {n: [v, new[n]] for n, v in sizes.items() if new[n] != v}
        return text, {**info, "forward_ms": round(ms, 2), "changed": changed, "budget_x": relax}
    return None, {"left_out": "; ".join(errors)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernelbench", type=Path, help="a KernelBench checkout (holding level1/, level2/, ...)")
    ap.add_argument("out", type=Path, help="output folder (outside this repository)")
    ap.add_argument("--levels", default="1,2", help="comma-separated levels (default 1,2)")
    ap.add_argument("--only", nargs="*", default=None, help="problem file stems to convert (default: all)")
    ap.add_argument("--max-ms", type=float, default=200.0, help="slowest acceptable CPU forward (ms)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    root = args.kernelbench.resolve()
    if not root.is_dir():
        ap.error(f"{root} is not a directory")
    repo = Path(__file__).resolve().parents[1]
    out = args.out.resolve()
    if out == repo or repo in out.parents:
        ap.error(f"write the copies outside this repository (KernelBench's files are never committed): {out}")
    levels = [f"level{int(s)}" for s in args.levels.split(",") if s.strip()]
    files = [f for lv in levels for f in sorted((root / lv).glob("*.py"), key=_numeric)
             if args.only is None or f.stem in args.only]
    if not files:
        ap.error(f"no problem files under {root} for {', '.join(levels)}")
    report: dict[str, dict] = {}
    for f in files:
        text, info = convert(f, args.max_ms)
        key = f"{f.parent.name}/{f.stem}"
        report[key] = info
        if text is not None:
            (out / f.parent.name).mkdir(parents=True, exist_ok=True)
            (out / f.parent.name / f.name).write_text(text)
        print(f"{key}: " + (f"{info['forward_ms']:.1f} ms, {info['elements']} elements, {info['flops']:.3g} flops"
                            if text is not None else f"LEFT OUT ({info['left_out']})"), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sizes.json").write_text(json.dumps({"source": str(root), "elements": ELEMENTS, "flops": FLOPS,
                                                "problems": report}, indent=1))
    kept = sum(1 for v in report.values() if "left_out" not in v)
    print(f"{kept} of {len(report)} problems written to {out} ({len(report) - kept} left out; see sizes.json)")
    return 0


def _numeric(path: Path) -> tuple[int, str]:
    m = re.match(r"(\d+)", path.stem)
    return (int(m.group(1)) if m else 1 << 30, path.stem)


if __name__ == "__main__":
    sys.exit(main())
