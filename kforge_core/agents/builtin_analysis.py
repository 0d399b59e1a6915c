"""The built-in performance-analysis agent: measured profile facts -> moves from a fixed catalogue.

Reads the profile summary (custom kernels, their launches per forward and time shares, time in PyTorch ops), the
roofline facts (bound, % of the measured bandwidth / FLOP/s) and the timings, plus what the program already does
(its `# kforge-builtin:` schedule marker, or for any other program what its source shows) and which moves the
optimization history already tried on this program. Every recommendation names a catalogue move and cites the
numbers behind it; when every move is applied or tried, it recommends nothing. A program slower than eager gets the
deficit first (how far behind, how much of it the custom kernels could take off) and every applicable move, ordered
by the share of the kernels' time each is estimated to save, so the pass does not give up while one is left.
"""

from __future__ import annotations

import os
import re

from .base import AnalysisRequest, AnalysisResult, Recommendation, TokenSink, rule_based_answer
from ..synth.schedule import CATALOGUE, LABEL, MOVE_TITLES, Schedule, read_marker



def _moves_in_history(history: list[dict], program_iteration: int | None = None) -> set:
    """The catalogue moves already tried on the program being analysed. A move counts for the program it was built
    on (`built_on`): one that did not beat an earlier best is applicable again once the best has changed (it was
    judged against a different program, and on this busy machine perhaps within the noise). A move whose candidate
    failed (wrong, crashed, did not build) stays tried on every program: the same writer would fail the same way.
    Entries without `built_on` (written by hand, or by an older loop) count for every program."""
    tried = set()
    for h in history or []:
        if not isinstance(h, dict):
            continue
        on = h.get("built_on")
        if (program_iteration is not None and isinstance(on, int) and on != program_iteration
                and h.get("status") == "correct"):
            continue
        for key in ("move", "moves"):
            v = h.get(key)
            if isinstance(v, str):
                tried.add(v)
            elif isinstance(v, (list, tuple)):
                tried |= {x for x in v if isinstance(x, str)}
        recs = h.get("recommendations") or ([h["recommendation"]] if isinstance(h.get("recommendation"), dict) else [])
        for r in recs:  # a recommendation marked applied=False was handed to the generator but never built
            if isinstance(r, dict) and r.get("move") and r.get("applied") is not False:
                tried.add(r["move"])
        # a history written by hand (or by an older loop) may say what was tried only in words; the loop's own
        # "tried" text names only what was built
        text = str(h.get("tried", ""))
        for move, title in MOVE_TITLES.items():
            if title in text or f"[{move}]" in text:
                tried.add(move)
    return tried & set(CATALOGUE)


def _infer_schedule(program: str, gpu: bool) -> Schedule:
    """What a program (not written by the built-in generator) already does, read from its source."""
    src = program or ""
    launches = len(re.findall(r'extern\s+"C"', src)) + len(re.findall(r"__global__", src)) + \
        len(re.findall(r"@triton\.jit", src)) + len(re.findall(r"\bkernel\s+void\b", src))
    return Schedule(
        fuse=launches <= 1,
        parallel=gpu or "omp parallel" in src,
        vectorize=bool(re.search(r"#pragma omp[^\n]*\bsimd\b|__m256|__m512|float4|_mm256|vld1q|simd_|tl\.arange",
                                src)),
        block=bool(re.search(r"BLOCK|blockDim|chunk", src)),
        unroll=bool(re.search(r"unroll|simdlen", src)),
        warp_reduce=bool(re.search(r"__shfl|simd_sum|simd_max|tl\.sum|tl\.max", src)),
    )


FAR_FROM_FLOOR_PCT = 20  # below this share of its memory floor, a CPU program's time is not its memory traffic


def _pct(x) -> str:
    return f"{100 * x:.0f}%"


class BuiltinAnalysisAgent:
    label = LABEL
    reads_device_profiler = False  # its rules read torch.profiler's kernel times, the roofline and the timings

    def analyze(self, request: AnalysisRequest, on_token: TokenSink | None = None) -> AnalysisResult:
        return rule_based_answer(lambda: self._analyze(request), lambda r: r.text, LABEL, on_token)

    # --------------------------------------------------------------------------------------------------
    def _analyze(self, req: AnalysisRequest) -> AnalysisResult:
        marker = read_marker(req.program)
        gpu = req.spec.device_type != "cpu"
        sched = Schedule.from_dict(marker.get("schedule", {})) if marker else _infer_schedule(req.program, gpu)
        tried = _moves_in_history(req.history, req.iteration)
        facts = self._facts(req, marker)
        slow = _slowdown(req, facts)
        recs: list[tuple[tuple, Recommendation]] = []

        def add(move: str, score: float, saves: float, change: str, why: str, gain: str) -> None:
            """`score`: the catalogue's usual order; `saves`: the share of the custom kernels' time the move is
            estimated to take off (from the profile facts), which orders the moves of a program slower than eager."""
            if move in tried or sched.applied(move):
                return
            if slow:
                why += f"; estimated to take ~{_pct(saves)} off the kernels' {slow['kernel_ms']:.3g} ms"
            recs.append(((-saves, -score) if slow else (-score,),
                         Recommendation(title=MOVE_TITLES[move], change=change, why=why, expected_gain=gain,
                                        move=move)))

        f = facts
        time_text = f"{f['per_forward_ms']:.3g} ms per forward" if f["per_forward_ms"] else "the forward"
        bw_text = (f"{f['pct_roofline']:.0f}% of the {f['bound'] or 'roofline'} floor "
                   f"({f['floor_ms']:.3g} ms at the measured {f['ceiling']})") if f["pct_roofline"] else \
            "no roofline measurement"
        near_floor = f["pct_roofline"] is not None and f["pct_roofline"] >= 85
        # near the floor, what is left to take off is mostly not the inner loops' work
        inner = 0.5 if near_floor else 1.0
        # a compute-bound problem whose kernels call transcendental functions spends its time in them: fusing saves
        # passes over memory, which is not where that time goes, while vectorizing replaces scalar libm calls
        # (KernelBench's Matmul_Mish_Mish on the CPU: 3 kernels at 7 % of the compute floor, fused first, no faster)
        # On the CPU the same holds for a "memory-bound" one far from its memory floor: the bound is the roofline's
        # arithmetic, but scalar libm calls at ~10 ns an element leave it nowhere near the bandwidth (KernelBench's
        # Softplus at CPU size: 1.4 % of the floor, parallelized first on 2 cores, still 0.26x eager)
        far = f["pct_roofline"] is not None and f["pct_roofline"] < FAR_FROM_FLOOR_PCT
        arithmetic = f["transcendental"] and not near_floor and (f["bound"] == "compute" or (not gpu and far))

        # fuse: several custom kernels per forward, or elementwise PyTorch ops next to them
        kernels = f["kernels_per_forward"]
        if kernels > 1 or f["aten_pointwise_share"] > 0.1:
            parts = []
            if kernels > 1:
                parts.append(f"{kernels:g} custom kernel launches per forward ({f['kernel_list']}), each a full pass "
                             f"over memory for its inputs and outputs")
            if f["aten_pointwise_share"] > 0.1:
                parts.append(f"elementwise PyTorch ops ({f['aten_pointwise']}) take {_pct(f['aten_pointwise_share'])} "
                             f"of the time")
            traffic = (1 - 1 / kernels if kernels > 1 else 0.0) * (0.3 if arithmetic else 1.0)
            add("fuse", 100 + kernels, max(traffic, f["aten_pointwise_share"]),
                "Merge producer/consumer kernels so intermediates stay in registers: one "
                "pass over memory per fused group instead of one per node.",
                "; ".join(parts) + f"; {bw_text}",
                f"up to ~{max(kernels, 2):.0f}x less memory traffic on the fused part" if kernels > 1 else "~1.2-2x")
        # parallelize across rows / cores
        if not gpu:
            cores = os.cpu_count() or 1
            add("parallelize_rows", 90, 1 - 1 / min(cores, 4), f"Distribute rows (and row chunks) over the {cores} "
                "cores with `#pragma omp parallel for`.",
                f"the custom kernels take {_pct(f['custom_share'])} of {time_text} and run on one thread of {cores} "
                f"cores; {bw_text}", f"up to ~{min(cores, 4)}x on the kernel time" if cores > 1 else "none (1 core)")
        else:
            if f["has_reduction"]:
                add("parallelize_rows", 90, 0.5, "Give each row to a whole thread block (block-wide reduction) "
                    "instead of a single thread looping over the row.",
                    f"row kernels take {_pct(f['custom_share'])} of {time_text}; one thread per row leaves most "
                    f"lanes idle; {bw_text}", "large for long rows")
            if f["has_reduction"]:
                add("warp_reduce", 80, 0.2 * inner, "Reduce within warps with shuffles (then across warps through "
                    "shared memory) instead of a shared-memory tree with a barrier per step.",
                    f"row reductions are {f['reduction_kernels']} of the kernels; {bw_text}", "~1.1-1.5x on row "
                    "kernels")
        # vectorize
        inner_text = "transcendental functions in the inner loop run as scalar libm calls" if f["transcendental"] \
            else "scalar loads and stores"
        add("vectorize", 70 if not near_floor else 40,
            (0.75 if arithmetic else 0.5 if f["transcendental"] else 0.2) * inner,
            "Vectorize the inner loops: `#pragma omp simd` with reduction clauses, restrict pointers, inline "
            "polynomial exp/log/tanh/erf (float4 loads on GPUs).",
            f"{bw_text}; {inner_text}; custom kernels are {_pct(f['custom_share'])} of {time_text}",
            "~1.5-4x on compute-heavy elementwise code" if f["transcendental"] else "~1.1-1.5x")
        # block / chunk shape: in a row kernel of several passes, the row cache keeps expensive intermediates
        # instead of computing them again in the write pass
        recompute = f["multi_pass"] and f["transcendental"]
        add("block_shape", 50 if not near_floor else 30, (0.3 if recompute else 0.1) * inner,
            "Change the work decomposition: fixed 4096-element chunks for elementwise kernels; a per-thread row cache "
            "for expensive intermediates and dynamic row scheduling in row kernels (block size on GPUs).",
            f"{f['top_kernel_text']}; " + ("row kernels make several passes and recompute expensive intermediates in "
                                           "each; " if recompute else "") + bw_text, "~1.0-1.3x")
        # unroll
        add("unroll", 40 if not near_floor else 20, 0.1 * inner,
            "Unroll the inner loops (two vectors per iteration, independent accumulators for reductions).",
            f"{f['top_kernel_text']}; reductions carry a dependency through one accumulator; {bw_text}",
            "~1.0-1.2x")
        recs.sort(key=lambda sr: sr[0])
        out = [r for _, r in recs]
        head = [slow["text"]] if slow else []
        if not out:
            applied = ", ".join(sched.moves()) or "none"
            text = (f"The built-in move catalogue is exhausted for this program (applied: {applied}; tried: "
                    f"{', '.join(sorted(tried)) or 'none'}). {bw_text[0].upper() + bw_text[1:]}.")
            return AnalysisResult(recommendations=[], text="\n".join(head + [text]))
        lines = head + [f"Measured: {time_text}; custom kernels {_pct(f['custom_share'])} of it; {bw_text}."]
        if f["speedup_text"]:
            lines.append(f["speedup_text"])
        if slow:
            lines.append("Slower than eager: every applicable move is recommended, the ones estimated to take the "
                         "most off the kernels' time first.")
        for i, r in enumerate(out, 1):
            lines.append(f"{i}. [{r.move}] {r.title}: {r.why} (expected {r.expected_gain})")
        if tried:
            lines.append(f"Already tried on this program: {', '.join(sorted(tried))}.")
        return AnalysisResult(recommendations=out, text="\n".join(lines))

    @staticmethod
    def _facts(req: AnalysisRequest, marker: dict | None) -> dict:
        prof = req.profile if isinstance(req.profile, dict) and "error" not in req.profile else {}
        roof = req.roofline if isinstance(req.roofline, dict) else {}
        rows = prof.get("kernels") or []
        custom = [r for r in rows if r.get("custom")]
        launches = prof.get("launches_per_forward")
        if launches is None:
            launches = len(marker.get("kernels", [])) if marker else (
                len(re.findall(r'extern\s+"C"|__global__|@triton\.jit', req.program or "")) or 1)
        kernel_list = ", ".join(f"{r['name'].split('::')[-1]} {_pct(r.get('share', 0))}" for r in custom[:4]) or \
            ", ".join(k["name"] for k in (marker or {}).get("kernels", [])[:4])
        pointwise = re.compile(r"aten::(add|sub|mul|div|relu|gelu|silu|sigmoid|tanh|exp|clamp|where|pow|rsqrt|"
                               r"neg|copy_|contiguous|clone|maximum|minimum|softmax|layer_norm)")
        aten_pw = [r for r in rows if not r.get("custom") and pointwise.match(r.get("op") or r.get("name", ""))]
        top = custom[0] if custom else None
        top_text = (f"{top['name'].split('::')[-1]} is {_pct(top.get('share', 0))} of the time "
                    f"({top.get('ms_per_forward', 0):.3g} ms, {top.get('calls_per_forward', 0):g} call(s) per forward)"
                    ) if top else "no per-kernel profile"
        pct = roof.get("pct_of_roofline")
        bound = roof.get("bound")
        if bound == "memory" and roof.get("bandwidth_gbs"):
            ceiling = f"{roof['bandwidth_gbs']:.3g} GB/s"
        elif roof.get("fp32_tflops"):
            ceiling = f"{roof['fp32_tflops']:.3g} TFLOP/s"
        else:
            ceiling = "ceilings"
        speed = ""
        if req.candidate_ms and (req.eager_ms or req.compiled_ms):
            parts = []
            if req.eager_ms:
                parts.append(f"{req.eager_ms / req.candidate_ms:.2f}x vs eager ({req.eager_ms:.3g} ms)")
            if req.compiled_ms:
                parts.append(f"{req.compiled_ms / req.candidate_ms:.2f}x vs torch.compile ({req.compiled_ms:.3g} ms)")
            speed = f"Candidate {req.candidate_ms:.3g} ms: " + ", ".join(parts) + "."
        src = req.program or ""
        # in the kernels, not the math helpers every built-in CPU program defines ahead of them (kf_exp, kf_tanh...)
        first_kernel = re.search(r'extern\s+"C"|__global__|@triton\.jit', src)
        kernels_src = src[first_kernel.start():] if first_kernel else src
        transcendental = bool(re.search(r"kf_exp|kf_erf|kf_tanh|kf_log|std::exp|expf|erff|tanhf|std::erf|std::tanh|"
                                        r"tl\.exp|__expf", kernels_src))
        reductions = [k for k in (marker or {}).get("kernels", []) if k.get("passes")]
        return {
            "per_forward_ms": prof.get("per_forward_ms") or req.candidate_ms,
            "custom_share": prof.get("custom_share", 1.0 if not rows else 0.0) or 0.0,
            "kernels_per_forward": float(launches or 0),
            "kernel_list": kernel_list,
            "aten_pointwise_share": sum(r.get("share", 0) for r in aten_pw),
            "aten_pointwise": ", ".join(f"{r['name']} {_pct(r.get('share', 0))}" for r in aten_pw[:3]),
            "top_kernel_text": top_text,
            "pct_roofline": pct,
            "bound": bound,
            "floor_ms": roof.get("floor_ms") or 0.0,
            "ceiling": ceiling,
            "speedup_text": speed,
            "transcendental": transcendental,
            "has_reduction": bool(reductions) or bool(re.search(r"acc_|reduction\(|tl\.sum|__shfl", src)),
            "multi_pass": any(int(k.get("passes") or 0) >= 2 for k in reductions),
            "reduction_kernels": f"{len(reductions)} of {len((marker or {}).get('kernels', []))}" if marker else
            "some",
        }


def _slowdown(req: AnalysisRequest, facts: dict) -> dict | None:
    """For a program slower than eager: how far behind it is, where its time goes, and whether the custom kernels
    could close the gap at all (None for a program at least as fast as eager, or without both timings)."""
    cand, eager = req.candidate_ms, req.eager_ms
    if not cand or not eager or cand <= eager:
        return None
    share = min(max(facts["custom_share"], 0.0), 1.0)
    kernel_ms, deficit = share * cand, cand - eager
    rest_ms = cand - kernel_ms
    text = (f"Slower than eager: {cand:.3g} ms against eager's {eager:.3g} ms ({eager / cand:.2f}x). The custom "
            f"kernels take {kernel_ms:.3g} ms ({_pct(share)}); the rest (vendor library calls and PyTorch ops around "
            f"them) {rest_ms:.3g} ms. ")
    if rest_ms >= eager:
        text += (f"The time outside the custom kernels alone is more than eager's: no kernel move can make this "
                 f"program faster than eager; the moves below can only take off part of the {deficit:.3g} ms.")
    else:
        text += (f"To match eager the kernels must get {deficit:.3g} ms faster ({_pct(deficit / kernel_ms)} of "
                 f"their time).")
    return {"kernel_ms": kernel_ms, "deficit_ms": deficit, "text": text}
