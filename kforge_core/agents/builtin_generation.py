"""The built-in generation agent: trace the reference (in a child process), lower it, group primitives into kernels,
and write a candidate in the target's own format. No LLM anywhere.

Functional pass: the first candidate is deliberately plain (one kernel per traced node, serial scalar loops), so
the optimization pass has real, measured steps to take. Each optimization step applies one move from the catalogue
(`schedule.CATALOGUE`) on top of the previous program's schedule (read from its marker comment): the first of the
analysis' recommendations (in its order) that is not applied yet and changes the program (with no analysis, the
next one in the target's default order). The result names the moves it was built with (`GenerationResult.moves`),
so the loop records only those as tried and the other recommendations come back in later steps. When no
recommended move is left the agent says so instead of repeating a program.
"""

from __future__ import annotations

import hashlib
import threading

from .base import GenerationRequest, GenerationResult, TokenSink, rule_based_answer
from .facts import size_class_for
from ..platform import TargetSpec, get_platform
from ..synth.backends import select_backend
from ..synth.plan.fusion import build_plan
from ..synth.lower.graph import CannotEmit, lower
from ..synth.lower.rowops import SLOW_NOTE
from ..synth.plan.plans import ProgramPlan
from ..synth.schedule import LABEL, MOVE_TITLES, Schedule, first_schedule, marker_line, order_for, read_marker
from ..synth.trace import TraceFailed, trace_problem

_FAILED = ("incorrect", "compile_error", "runtime_error", "timeout", "rejected", "no_program")

MOVE_TEXT = {
    "fuse": "fused producer/consumer nodes into shared kernels (one pass over memory per kernel, intermediates "
            "stay in registers)",
    "parallelize_rows": "spread rows (and row chunks) across all cores / thread blocks",
    "vectorize": "vectorized inner loops (SIMD pragmas, restrict pointers, vectorizable exp/log/tanh/erf; float4 on "
                 "GPUs)",
    "block_shape": "changed the work decomposition (4096-element chunks; per-thread row cache for expensive "
                   "intermediates in row kernels; block size on GPUs; on CUDA, GroupNorm's statistics computed "
                   "inside its elementwise kernel, a group ahead of their use)",
    "unroll": "unrolled the inner loops",
    "warp_reduce": "row reductions with warp/simd-group shuffles instead of shared-memory trees",
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _strip_marker(program: str | None) -> str:
    """The program without its header docstring and schedule marker: what actually runs."""
    if not program:
        return ""
    lines = program.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# kforge-builtin: "):
            return "\n".join(lines[i + 1:])
    return program


class BuiltinGenerationAgent:
    """Rule-based candidate synthesis. `size_class`: "auto" (the CPU size class on CPU targets, the file's sizes
    elsewhere), "cpu", "gpu" or None (the file's sizes); candidates also accept the other size class's init
    arguments when both trace to the same graph."""

    label = LABEL
    deterministic = True  # same request, same answer: the loop does not ask again after a refusal

    def __init__(self, size_class: str | None = "auto", trace_timeout_s: float = 120.0):
        self.size_class = size_class
        self.trace_timeout_s = trace_timeout_s
        self._traces: dict = {}
        self._lock = threading.Lock()
        self.last_report: dict = {}

    # --- public --------------------------------------------------------------------------------------
    def generate(self, request: GenerationRequest, on_token: TokenSink | None = None) -> GenerationResult:
        return rule_based_answer(lambda: self._generate(request), lambda r: r.reply_text, LABEL, on_token)

    def synthesize(self, problem_source: str, target: str | TargetSpec, schedule: Schedule | None = None,
                   problem_name: str = "problem") -> GenerationResult:
        """One candidate for an explicit schedule (tests, bench); `target` by name or as a resolved spec."""
        try:
            tinfo = get_platform(target).spec() if isinstance(target, str) else target
        except Exception as e:  # noqa: BLE001 - unknown target
            return GenerationResult(program=None, error=str(e))
        return self._build(problem_source, problem_name, tinfo, schedule or first_schedule(tinfo.name), move=None)

    # --- internals -----------------------------------------------------------------------------------
    def _size_class(self, tinfo: TargetSpec) -> str | None:
        if self.size_class == "auto":
            return size_class_for(tinfo.device_type)
        return self.size_class

    def trace(self, source: str, size_class: str | None) -> dict:
        key = (_digest(source), size_class)
        with self._lock:
            hit = self._traces.get(key)
        if hit is None:
            try:
                hit = trace_problem(source, size_class, timeout_s=self.trace_timeout_s)
            except TraceFailed as e:
                hit = e
            with self._lock:
                self._traces[key] = hit
        if isinstance(hit, Exception):
            raise hit
        return hit

    def _generate(self, req: GenerationRequest) -> GenerationResult:
        tinfo = req.spec
        prev = read_marker(req.previous_program)
        ours = prev is not None and prev.get("problem") == _digest(req.problem_source) and \
            prev.get("target") == tinfo.name
        prev_sched = Schedule.from_dict(prev.get("schedule", {})) if ours else None
        fb = req.feedback
        if req.pass_name != "optimization":
            if ours and fb is not None and fb.status in _FAILED:
                if prev_sched.conservative:
                    return GenerationResult(program=None, error=(
                        f"the built-in synthesizer's candidates failed ({fb.status}: {fb.reason[:300]}); it has no "
                        f"other variant for this problem"))
                sched = Schedule(conservative=True)
                res = self._build(req.problem_source, req.problem_name, tinfo, sched, move=None)
                if res.program and _strip_marker(res.program) == _strip_marker(req.previous_program):
                    return GenerationResult(program=None, error=(
                        f"the built-in synthesizer's candidate failed ({fb.status}: {fb.reason[:300]}); keeping "
                        f"reductions in PyTorch gives the same program, so it has no other variant"))
                if res.program is None:  # it wrote a program before: a failure to report, not a problem out of reach
                    return GenerationResult(program=None, coverage=res.coverage, error=(
                        f"the built-in synthesizer's candidate failed ({fb.status}: {fb.reason[:300]}); with "
                        f"reductions kept in PyTorch it has no program either ({res.error})"))
                res.notes = (res.notes + "; " if res.notes else "") + \
                    f"previous candidate failed ({fb.status}); reductions kept in PyTorch this time"
                return res
            return self._build(req.problem_source, req.problem_name, tinfo, first_schedule(tinfo.name), move=None)
        # optimization pass: one move on top of the previous schedule, the first recommended one that changes it
        base = prev_sched or first_schedule(tinfo.name)
        if fb is None:  # no analysis ran (a direct call): the target's default order
            candidates = list(order_for(tinfo.device_type))
        else:
            candidates = [r.move for r in fb.recommendations if r.move in MOVE_TEXT]
            if not candidates:
                return GenerationResult(program=None, error=(
                    "the analysis recommended no move from the built-in catalogue (every move is applied or was "
                    "tried); the built-in generator does not change a program without one"))
        previous = _strip_marker(req.previous_program) if ours else None
        unchanged: list[str] = []  # built, but the same program: tried, nothing to measure
        already = [m for m in dict.fromkeys(candidates) if base.applied(m)]
        for move in dict.fromkeys(m for m in candidates if not base.applied(m)):
            res = self._build(req.problem_source, req.problem_name, tinfo, base.with_move(move), move=move)
            if res.program is None:
                res.moves = unchanged + [move]
                return res
            if previous is not None and _strip_marker(res.program) == previous:
                unchanged.append(move)
                base = base.with_move(move)
                continue
            if unchanged:
                res.notes += f"; {', '.join(unchanged)} built but changed nothing for this program"
            if already:
                res.notes += f"; {', '.join(already)} already applied"
            res.moves = unchanged + [move]
            return res
        applied = ", ".join(base.moves()) or "none"
        return GenerationResult(program=None, moves=unchanged or None, error=(
            f"no recommended move changes this program (applied: {applied}"
            f"{'; built with no change: ' + ', '.join(unchanged) if unchanged else ''}); nothing left to try"))

    def _build(self, source: str, name: str, tinfo: TargetSpec, sched: Schedule, move: str | None) -> GenerationResult:
        backend = select_backend(tinfo)
        if backend is None:
            return GenerationResult(program=None, unsupported=True, error=(
                f"unsupported: the built-in generator has no kernel writer for target {tinfo.name!r} (candidate API "
                f"{list(tinfo.candidate_api)}, formats {list(tinfo.formats)})"))
        size_class = self._size_class(tinfo)
        try:
            desc = self.trace(source, size_class)
        except TraceFailed as e:
            return GenerationResult(program=None, error=f"cannot trace the problem: {e}", unsupported=e.untraceable)
        try:
            low = lower(desc, conservative=sched.conservative, fuse_cat=backend.fuses_cat,
                        halves=backend.half_dtypes, columns=backend.column_kernels)
        except CannotEmit as e:
            return GenerationResult(program=None, error=f"cannot synthesize this module: {e}", unsupported=True)
        plan = backend.refine(build_plan(low, fuse=sched.fuse), sched)
        report = share_report(plan)
        self.last_report = report
        if not plan.kernels and not plan.columns:
            # nothing of it is ours to write: every schedule gives the same empty plan
            return GenerationResult(program=None, error=report["nothing_message"], notes=report["summary"],
                                    coverage=report["coverage"], unsupported=True)
        info = {"version": 1, "target": tinfo.name, "problem": _digest(source), "schedule": sched.to_dict(),
                "size_class": desc.get("size_class"), "backend": backend.kind,
                "kernels": [{"name": k.name, "label": k.label, "passes": k.npasses} for k in plan.kernels]}
        if plan.columns:
            info["columns"] = [{"name": c.kname, "label": c.label, "kind": c.kind} for c in plan.columns]
        header = (f"Candidate for {name} on {tinfo.title}, written by KForge's {LABEL} synthesizer.\n\n"
                  f"{report['summary']}.\nSchedule: {_sched_text(sched)}.")
        try:
            program = backend.program(plan, desc, sched, tinfo, header, marker_line(info))
        except ValueError as e:
            return GenerationResult(program=None, error=f"cannot write a {tinfo.name} candidate: {e}",
                                    notes=report["summary"], coverage=report["coverage"], unsupported=True)
        notes = report["summary"]
        reply = [f"Synthesized {len(plan.kernels) + len(plan.columns)} kernel(s) from the traced graph "
                 f"({desc.get('method', 'fx')}):"]
        for k in plan.kernels:
            kind = f"{k.npasses} reduction pass(es) + write pass" if k.npasses else "elementwise"
            reply.append(f"- {k.name}: {k.label} ({kind})")
        for c in plan.columns:
            fused = ", ".join(p.label or p.fn for p in c.pre + c.post)
            reply.append(f"- {c.kname}: {c.label} ({'window' if c.kind == 'pool' else 'column'} kernel: {c.kind}"
                         + (f"; fused: {fused})" if fused else ")"))
        if move:
            notes += f"; move {move!r}: {MOVE_TEXT[move]}"
            reply.insert(0, f"Applied move `{move}` ({MOVE_TITLES[move]}): {MOVE_TEXT[move]}.")
        for n in low.notes:
            if n.startswith("traced with torch.export") or "size class" in n or n.startswith(SLOW_NOTE):
                notes += f"; {n}"
        return GenerationResult(program=program, reply_text="\n".join(reply), notes=notes,
                                coverage=report["coverage"])


def _sched_text(s: Schedule) -> str:
    parts = [m for m in ("fuse", "parallelize_rows", "vectorize", "block_shape", "unroll", "warp_reduce")
             if s.applied(m)]
    text = "moves applied: " + (", ".join(parts) if parts else "none (plain first version)")
    if s.conservative:
        text += "; conservative (reductions kept in PyTorch)"
    return text


def share_report(plan: ProgramPlan) -> dict:
    low = plan.lowered
    counted = low.counted
    total = len(counted)
    in_kernels = [o for o, c in counted.items() if c in ("kernel", "lib+kernel")]
    libs = [o for o, c in counted.items() if c in ("lib", "lib+kernel")]
    kept = [o for o, c in counted.items() if c == "kept"]
    handled = [o for o, c in counted.items() if c != "kept"]
    kept_labels: dict[str, int] = {}
    for o in kept:
        lab = low.labels.get(o, o)
        kept_labels[lab] = kept_labels.get(lab, 0) + 1
    kept_text = ", ".join(f"{k}" + (f" x{v}" if v > 1 else "") for k, v in kept_labels.items())
    pct = 100.0 * len(handled) / total if total else 0.0
    nk = len(plan.kernels) + len(plan.columns)
    summary = (f"{len(handled)} of {total} nodes ({pct:.0f}%) synthesized: {len(in_kernels)} in {nk} custom "
               f"kernel{'s' if nk != 1 else ''}")
    if libs:
        summary += f", {len(libs)} matrix product{'s' if len(libs) != 1 else ''} via torch (vendor library)"
    if kept:
        summary += f"; kept in PyTorch: {kept_text}"
    reasons = "; ".join(f"{low.labels.get(o, o)}: {low.kept_reasons.get(o, '')}" for o in kept[:6])
    if not total:
        nothing = "nothing to synthesize: the traced graph has no compute node"
    elif libs and not in_kernels and not kept:
        names = ", ".join(low.labels[o] for o in libs)
        nothing = (f"nothing to synthesize: the module is only matrix products ({names}), which stay in the vendor "
                   f"library, with no elementwise or reduction work to fuse around them")
    else:
        nothing = (f"nothing to synthesize: no node has a kernel template (unsupported: {kept_text or 'none'}"
                   f"{'; ' + reasons if reasons else ''}). The built-in generator writes elementwise and "
                   f"last-dimension reduction kernels and fused epilogues of matrix products")
    coverage = summary + (f" (not supported: {reasons})" if reasons else "")
    return {"total": total, "synthesized": len(handled), "in_kernels": len(in_kernels), "library": len(libs),
            "kept": kept_labels, "kernels": nk, "share": pct / 100.0, "summary": summary, "coverage": coverage,
            "nothing_message": nothing, "kept_reasons": {low.labels.get(o, o): low.kept_reasons.get(o, "")
                                                         for o in kept}}
