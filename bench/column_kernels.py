"""The CUDA column reductions at KernelBench's size on a GPU: eager PyTorch against the built-in's program, now and
before (the programs another git ref's synthesizer writes, by default `main`), for level 1's reductions over dim 1 of
a (128, 4096, 4095) fp32 tensor: 47 sum (keepdim), 48 mean, 49 max, 53 min, 51 argmax, 52 argmin
(`tests/column_reduction_cases.py`).

Each call is timed alone with CUDA events, the L2 flushed before it by writing a buffer twice its size outside the
timed region; the variants of a problem take turns call by call (so drift hits each alike), a few warm-up calls
first; the table gives medians of --calls timed calls, the read bandwidth they mean, and the speedup over eager.
Outputs are checked against eager once first (max / min / argmax / argmin bit for bit, sums and means within 1e-4).

    python bench/column_kernels.py                      # on a GPU; before = the `main` branch's programs
    python bench/column_kernels.py --before none        # only eager and the working tree's programs
    python bench/column_kernels.py --dry-run            # no GPU: build every program (and compile its kernels with
                                                        # NVRTC where KFORGE_NVRTC points at one), time nothing

The "before" programs are written by the ref's own synthesizer (`git archive` of its kforge_core into a temporary
folder, run in a child Python), or by the one in --before-dir; without either (a copy of the tree without git) the
column is left out, as with --before none.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.column_reduction_cases import EXACT, KERNELBENCH, OPS, column_problem  # noqa: E402

# the child that writes the programs with another ref's synthesizer: problem sources in on stdin, programs out
_SYNTH = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from kforge_core.agents.builtin_generation import BuiltinGenerationAgent
from kforge_core.synth.schedule import first_schedule, order_for
sched = first_schedule("cuda")
for move in order_for("cuda"):
    sched = sched.with_move(move)
out = {}
for name, source in json.load(sys.stdin).items():
    res = BuiltinGenerationAgent().synthesize(source, "cuda", sched, name)
    out[name] = res.program or ("ERROR " + str(res.error))
print(json.dumps(out))
"""


def programs_at(root: Path, sources: dict[str, str]) -> dict[str, str]:
    """The optimized CUDA programs the synthesizer under `root` writes for `sources`."""
    proc = subprocess.run([sys.executable, "-c", _SYNTH, str(root)], input=json.dumps(sources), capture_output=True,
                          text=True, cwd=root, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"synthesizing at {root} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = {k: v for k, v in out.items() if v.startswith("ERROR ")}
    if bad:
        raise RuntimeError(f"no program at {root}: {bad}")
    return out


def before_programs(ref: str, sources: dict[str, str]) -> dict[str, str] | None:
    """The programs `ref`'s synthesizer writes, or None (with a note) where git has no such ref here."""
    try:
        tar = subprocess.run(["git", "archive", ref, "kforge_core", "platforms"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", b"") or b""
        print(f"note: no 'before' column: git archive {ref} failed ({err.decode(errors='replace').strip() or e})")
        return None
    with tempfile.TemporaryDirectory(prefix="kf_before_") as tmp:
        with tarfile.open(fileobj=BytesIO(tar)) as t:
            t.extractall(tmp, filter="data")
        return programs_at(Path(tmp), sources)


def _kernel_lines(program: str) -> list[str]:
    """The program's column-kernel launches (to show what ran)."""
    return [ln.strip() for ln in program.splitlines() if ln.strip().startswith(("self.kf_mod.kf_c", "kf_k = "))]


def dry_run(variants: dict[str, dict[str, str]]) -> None:
    """No GPU: every program was built; compile each one's kernels with NVRTC where it loads."""
    try:
        from tests.nvrtc_only import compile_source, kernel_source, nvrtc
        have = nvrtc() is not None
    except Exception as e:  # noqa: BLE001 - the check is optional here
        print(f"note: NVRTC not loaded ({e}); kernels not compiled")
        have = False
    for label, progs in variants.items():
        for name, program in progs.items():
            status = "built"
            if have:
                ok, log = compile_source(kernel_source(program))
                status = "built, compiled for sm_90" if ok else f"built, NVRTC FAILED:\n{log}"
            print(f"{label:>8}  {name:<16} {len(program):>6} chars  {status}")
            for ln in _kernel_lines(program):
                print(f"{'':>10}{ln}")


def _load(program: str, init: list):
    ns: dict = {}
    exec(compile(program, "candidate", "exec"), ns)  # noqa: S102 - our own synthesized program
    return ns["ModelNew"](*init).cuda()


def _same(op: str, got, want) -> bool:
    import torch

    if op in EXACT:
        g = got.view(torch.int32) if got.dtype == torch.float32 else got
        w = want.view(torch.int32) if want.dtype == torch.float32 else want
        return got.dtype == want.dtype and torch.equal(g, w)
    return got.shape == want.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-4)


def time_problem(op: str, shape: tuple, variants: dict[str, str], calls: int, warmup: int) -> dict:
    """Median ms of each variant ('eager' and the programs) on one input, calls taking turns, the L2 flushed before
    each."""
    import torch

    source = column_problem(op, shape)
    ns: dict = {}
    exec(compile(source, "problem", "exec"), ns)  # noqa: S102 - our own problem
    init = ns["get_init_inputs"]()
    fns = {"eager": ns["Model"](*init).cuda()} | {k: _load(p, init) for k, p in variants.items()}
    x = torch.rand(shape, device="cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size or (50 << 20)
    flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
    with torch.no_grad():
        want = fns["eager"](x)
        wrong = [k for k, f in fns.items() if k != "eager" and not _same(op, f(x), want)]
        for _ in range(warmup):
            for f in fns.values():
                f(x)
        times: dict[str, list[float]] = {k: [] for k in fns}
        for i in range(calls):
            for k, f in fns.items():
                flush.fill_(float(i))  # outside the timed region: the call finds nothing of x in L2
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                f(x)
                b.record()
                b.synchronize()
                times[k].append(a.elapsed_time(b))
    del x, flush
    torch.cuda.empty_cache()
    return {"ms": {k: statistics.median(v) for k, v in times.items()}, "wrong": wrong}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="main", help="git ref whose synthesizer writes the 'before' programs "
                                                     "(default main; 'none' to leave them out)")
    ap.add_argument("--before-dir", help="a folder holding the 'before' kforge_core (and platforms), used instead "
                                         "of --before where git is not at hand: `git archive main kforge_core "
                                         "platforms | tar -x -C DIR` where it is")
    ap.add_argument("--problems", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))
    ap.add_argument("--shape", default="x".join(map(str, KERNELBENCH)), help="input shape, reduced over dim 1")
    ap.add_argument("--calls", type=int, default=50, help="timed calls per variant (median)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="build the programs only (no GPU needed)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    ops = [p for p in args.problems.split(",") if p]
    unknown = [p for p in ops if p not in OPS]
    if unknown:
        ap.error(f"unknown problems {unknown}; choose from {list(OPS)}")
    shape = tuple(int(n) for n in args.shape.split("x"))
    sources = {op: column_problem(op, shape) for op in ops}
    variants = {"built-in": programs_at(ROOT, sources)}
    if args.before_dir or args.before != "none":
        before = (programs_at(Path(args.before_dir).resolve(), sources) if args.before_dir
                  else before_programs(args.before, sources))
        if before is not None:
            variants = {"before": before} | variants
    if args.dry_run:
        dry_run(variants)
        return 0

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run to only build the programs", file=sys.stderr)
        return 2
    gbytes = shape[0] * shape[1] * shape[2] * 4 / 1e9
    print(f"{torch.cuda.get_device_name(0)}, x {shape} fp32 ({gbytes:.2f} GB read a call), median of {args.calls} "
          "calls, L2 flushed before each")
    labels = list(variants)
    head = f"{'problem':<16} {'eager ms':>9} " + " ".join(f"{k + ' ms':>12}" for k in labels) + " " + " ".join(
        f"{k + ' x':>12}" for k in labels) + f" {'GB/s':>6}"
    print(head)
    rows = []
    for op in ops:
        res = time_problem(op, shape, {k: variants[k][op] for k in labels}, args.calls, args.warmup)
        ms = res["ms"]
        row = (f"{op:<16} {ms['eager']:>9.3f} " + " ".join(f"{ms[k]:>12.3f}" for k in labels) + " "
               + " ".join(f"{ms['eager'] / ms[k]:>11.2f}x" for k in labels)
               + f" {gbytes / (ms[labels[-1]] / 1e3):>6.0f}")
        if res["wrong"]:
            row += f"  WRONG: {','.join(res['wrong'])}"
        print(row, flush=True)
        rows.append({"problem": op, **res})
    if args.json:
        Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "shape": shape,
                                               "rows": rows}, indent=1))
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
