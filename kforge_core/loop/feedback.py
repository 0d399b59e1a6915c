"""What the loop tells the agents about earlier attempts: the feedback a generation builds on, and the history
entries the analysis agent reads (the `AnalysisRequest.history` contract)."""

from __future__ import annotations

from ..agents.base import Feedback, Recommendation
from .types import Attempt


def feedback_for(attempt: Attempt) -> Feedback:
    """The attempt's status, reason (with the failed checks of a wrong program), log and timings."""
    v = attempt.verdict
    log = ""
    if v is not None:
        log = v.compile_log or (v.log_tail if attempt.status in ("runtime_error", "timeout") else "")
    reason = attempt.reason
    if v is not None and attempt.status == "incorrect":
        failed = [c.get("detail") or c.get("name") for c in v.checks if not c.get("passed")]
        extra = [d for d in failed if d and d not in reason]
        if extra:
            reason += "\nFailed checks: " + "; ".join(extra[:5])
    return Feedback(status=attempt.status, reason=reason, compile_log=log or "",
                    candidate_ms=v.candidate_ms if v else None, eager_ms=v.eager_ms if v else None,
                    compiled_ms=v.compiled_ms if v else None)


def optimization_feedback(best: Attempt, last: Attempt | None,
                          recommendations: list[Recommendation]) -> Feedback:
    """About the best program (which the model rewrites), plus why the latest attempt was not kept, if it wasn't."""
    fb = feedback_for(best)
    fb.recommendations = list(recommendations)
    if last is not None and last is not best and last.iteration > best.iteration:
        followed = "; ".join(f'"{r.title}"' for r in last.recommendations)
        tried = f", which followed the recommendation(s) {followed}," if followed else ""
        if last.correct:
            ms = f" ({last.candidate_ms:.4g} ms)" if last.candidate_ms is not None else ""
            fb.reason += (f"\nYour latest attempt (iteration {last.iteration}){tried} was correct but not "
                          f"faster{ms}; try a different change.")
        else:
            fb.reason += (f"\nYour latest attempt (iteration {last.iteration}){tried} was not kept: "
                          f"{last.status}: {last.reason}")
            last_fb = feedback_for(last)
            fb.compile_log = last_fb.compile_log
    return fb


def history_entry(attempt: Attempt, best_before: Attempt) -> dict:
    built = [r for r in attempt.recommendations if r.applied is not False]  # False: handed over, never built
    tried = "; ".join(r.title for r in built) or "a rewrite"
    if attempt.correct and attempt.candidate_ms is not None and best_before.candidate_ms:
        outcome = f"correct, {attempt.candidate_ms:.4g} ms vs {best_before.candidate_ms:.4g} ms before " \
                  f"({best_before.candidate_ms / attempt.candidate_ms:.2f}x)"
    else:
        outcome = f"{attempt.status}: {attempt.reason[:200]}"
    # The AnalysisRequest.history contract: what was tried (titles, and catalogue moves for the built-in agent),
    # on which program (`built_on`, the best it rewrote), what it measured, in words and as numbers.
    return {"iteration": attempt.iteration, "built_on": best_before.iteration, "tried": tried, "outcome": outcome,
            "status": attempt.status,
            "candidate_ms": attempt.candidate_ms, "best_ms_before": best_before.candidate_ms,
            "recommendations": [r.to_dict() for r in built],
            "moves": [r.move for r in built if r.move]}
