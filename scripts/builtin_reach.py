"""The built-in synthesizer's reach over a KernelBench checkout, statically: every problem is traced once and then
lowered, planned and written for each target (no compilation, no evaluation).

    python scripts/builtin_reach.py /path/to/KernelBench                      # levels 1 and 2, all targets
    python scripts/builtin_reach.py /path/to/KernelBench --level 1 --target cpu --json out.json
    python scripts/builtin_reach.py /path/to/KernelBench --problems 'level1/2*' --verbose

A problem is *supported* on a target when the built-in writes a candidate with at least one kernel and keeps no
node in PyTorch except vendor-library work (matrix products, convolutions); *partly* when the candidate also keeps
other nodes in PyTorch for lack of a kernel template; otherwise it has no candidate. "with a candidate" (supported
+ partly) is the count issue #26 quoted (level1 28/100, level2 95/100 before the families of this script's commit).
For every problem not supported, its first unsupported node gives the reason: grouped by operator and reason (the
synthesizer's own message with node names and sizes blanked, so equal causes count together), or why there is no
candidate at all (only vendor-library work, a trace failure, a node that cannot even be re-emitted).

`--trace-cache DIR` keeps each problem's traced description (by the problem's text), so a second survey (another
target, the synthesizer changed) lowers and plans again without tracing; delete it when the tracer changes.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import sys
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kforge_core.platform import discover, get_platform  # noqa: E402
from kforge_core.synth.backends import select_backend  # noqa: E402
from kforge_core.synth.lower.graph import CannotEmit, lower  # noqa: E402
from kforge_core.synth.plan.fusion import build_plan  # noqa: E402
from kforge_core.synth.schedule import Schedule  # noqa: E402
from kforge_core.synth.trace import TraceFailed, trace_problem  # noqa: E402

TARGETS = ("cpu", "cuda", "triton", "metal")
# kept in PyTorch on purpose: the vendor library's convolutions (matrix products are lowered as library calls)
VENDOR = re.compile(r"^(conv(transpose)?[123]d|conv[123]d|conv_transpose[123]d|convolution)$")


def _blank(reason: str) -> str:
    """A reason with the problem-specific parts (node names, shapes, numbers) blanked, for grouping."""
    reason = re.sub(r"\b[a-z_][a-z0-9_]*__\d+\b", "<v>", reason)  # synthetic value names
    reason = re.sub(r"\b(t_)?[a-z_]+_\d+\b", "<v>", reason)  # traced node names (x_1, sum_2, ...)
    reason = re.sub(r"\([\d, ]*\)|\[[\d, ]*\]", "<shape>", reason)
    reason = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "<n>", reason)
    return reason[:160]


def classify(desc: dict, target: str) -> dict:
    """{'status': 'supported'|'partial'|'none', 'reason': str, 'op': str} for one traced problem on one target."""
    spec = get_platform(target).spec()
    backend = select_backend(spec)
    if backend is None:
        return {"status": "none", "op": "-", "reason": f"no kernel writer for target {target}"}
    try:
        low = lower(desc, fuse_cat=backend.fuses_cat, halves=backend.half_dtypes, columns=backend.column_kernels)
    except CannotEmit as e:
        return {"status": "none", "op": "-", "reason": "cannot emit: " + _blank(str(e))}
    sched = Schedule()
    plan = backend.refine(build_plan(low, fuse=sched.fuse), sched)
    kept = [o for o, c in low.counted.items() if c == "kept"]
    vendor = [o for o in kept if VENDOR.match(low.labels.get(o, o))]
    others = [o for o in kept if o not in vendor]
    if not plan.kernels and not plan.columns:
        if others:
            return {"status": "none", "op": low.labels.get(others[0], others[0]),
                    "reason": _blank(low.kept_reasons.get(others[0], ""))}
        libs = sorted({low.labels.get(o, o) for o, c in low.counted.items() if c in ("lib", "lib+kernel")}
                      | {low.labels.get(o, o) for o in vendor})
        if libs:
            return {"status": "none", "op": "+".join(libs), "reason": "only vendor-library work (nothing to fuse)"}
        return {"status": "none", "op": "-", "reason": "no compute node"}
    try:
        backend.program(plan, desc, sched, spec, "reach", "# kforge-builtin: {}")
    except ValueError as e:
        return {"status": "none", "op": "-", "reason": "writer refused: " + _blank(str(e))}
    if others:
        return {"status": "partial", "op": low.labels.get(others[0], others[0]),
                "reason": _blank(low.kept_reasons.get(others[0], ""))}
    return {"status": "supported", "op": "", "reason": ""}


def problems(root: Path, levels: list[int], patterns: list[str]) -> list[tuple[str, Path]]:
    out = []
    for level in levels:
        folder = root / f"level{level}"
        if not folder.is_dir():
            raise SystemExit(f"{folder} is not a folder: give the KernelBench checkout (the folder holding level1/)")
        for path in sorted(folder.glob("*.py"), key=lambda p: (int(p.name.split("_")[0]) if p.name[0].isdigit()
                                                               else 10 ** 6, p.name)):
            key = f"level{level}/{path.stem}"
            if not patterns or any(fnmatch.fnmatch(key, pat) for pat in patterns):
                out.append((key, path))
    return out


def traced(source: str, timeout_s: float, cache: Path | None) -> dict:
    """The problem's description at its own sizes (as a GPU run traces it), from `cache` when it holds it."""
    hit = cache / (hashlib.sha256(source.encode()).hexdigest()[:32] + ".json") if cache else None
    if hit is not None and hit.exists():
        desc = json.loads(hit.read_text())
    else:
        try:
            desc = trace_problem(source, None, timeout_s=timeout_s)
        except TraceFailed as e:
            desc = {"ok": False, "error": str(e)}
        if hit is not None:
            hit.write_text(json.dumps(desc))
    if not desc.get("ok", True):
        raise TraceFailed(desc["error"])
    return desc


def survey(items: list[tuple[str, Path]], targets: list[str], jobs: int, timeout_s: float,
           cache: Path | None = None) -> dict:
    discover()  # the platform registry is filled once, before the threads read it
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    done = [0]

    def one(item):
        key, path = item
        try:
            desc = traced(path.read_text(), timeout_s, cache)
            res = {t: classify(desc, t) for t in targets}
        except TraceFailed as e:
            why = {"status": "none", "op": "-", "reason": "trace failed: " + _blank(str(e).splitlines()[0])}
            res = {t: why for t in targets}
        done[0] += 1
        print(f"[{done[0]}/{len(items)}] {key}: {res[targets[0]]['status']}", file=sys.stderr, flush=True)
        return key, res

    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each trace is a child process
        return dict(pool.map(one, items))


def report(results: dict, targets: list[str], verbose: bool) -> str:
    lines = []
    levels = sorted({k.split("/")[0] for k in results})
    for t in targets:
        lines.append(f"== target {t}")
        for lv in levels:
            keys = [k for k in results if k.startswith(lv + "/")]
            sup = sum(results[k][t]["status"] == "supported" for k in keys)
            part = sum(results[k][t]["status"] == "partial" for k in keys)
            lines.append(f"{lv}: {sup}/{len(keys)} supported, {part} partly (nodes kept in PyTorch); "
                         f"{sup + part}/{len(keys)} with a candidate")
        groups: dict[tuple, list[str]] = defaultdict(list)
        for k, per in results.items():
            r = per[t]
            if r["status"] != "supported":
                groups[(r["op"], r["reason"])].append(k)
        for (op, reason), keys in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            shown = ", ".join(k.split("/")[0][-1] + ":" + k.split("/")[1].split("_")[0] for k in keys)
            lines.append(f"  {len(keys):3d}  {op}: {reason}" + (f"   [{shown}]" if verbose else ""))
    if len(targets) > 1:
        ops = Counter(results[k][targets[0]]["op"] for k in results
                      if results[k][targets[0]]["status"] != "supported")
        lines.append(f"== first unsupported operator on {targets[0]}, all reasons together")
        lines += [f"  {n:3d}  {op}" for op, n in ops.most_common()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernelbench", type=Path, help="KernelBench checkout (the folder with level1/, level2/)")
    ap.add_argument("--level", type=int, action="append", help="levels to survey (default 1 and 2)")
    ap.add_argument("--target", action="append", choices=TARGETS, help="targets (default all four)")
    ap.add_argument("--problems", action="append", default=[], help="glob over level<N>/<stem>, repeatable")
    ap.add_argument("--jobs", type=int, default=2, help="traces at a time (each is a child process)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per trace")
    ap.add_argument("--json", type=Path, help="also write the per-problem results here")
    ap.add_argument("--trace-cache", type=Path, help="folder keeping the traced descriptions between surveys")
    ap.add_argument("--verbose", action="store_true", help="list the problems of each reason")
    args = ap.parse_args(argv)
    root = args.kernelbench
    if (root / "KernelBench").is_dir() and not (root / "level1").is_dir():
        root = root / "KernelBench"
    items = problems(root, args.level or [1, 2], args.problems)
    if not items:
        raise SystemExit("no problem matched")
    targets = args.target or list(TARGETS)
    results = survey(items, targets, args.jobs, args.timeout, args.trace_cache)
    print(report(results, targets, args.verbose))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
