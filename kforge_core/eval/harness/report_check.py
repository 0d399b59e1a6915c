"""The judge's check of the durations a candidate's process reported for its timed calls (`RemoteCandidate.timed`),
against what that process cannot forge: the judge's own brackets around the timed requests, and the CPU time the
caller read for them (docs/EVALUATOR.md, "What the judge takes from the candidate's process")."""

from __future__ import annotations

import statistics

# The median reported duration must be at least this share of the judge's fastest bracket around a timed call
# (less the channel's round trip), less REPORT_SLACK_MS. The fastest bracket, because a bracket only ever grows with
# noise (the candidate's process or the judge woken late on a busy machine); generous, because the candidate's
# process may be descheduled between receiving a request and starting its clock; a forged report is off by more.
REPORT_MIN_SHARE = 0.5
REPORT_SLACK_MS = 0.1


def judge(remote, strict: bool) -> tuple[dict, str, str | None]:
    """(a check for the verdict, a warning or "", the reason to reject or None) for `remote`'s timed calls.
    Reports far below the brackets are rejected when `strict` (accelerators: an idle device, a quiet host), and are
    a warning otherwise (a shared CPU box wakes processes late by milliseconds, so there a bracket says little about
    a sub-millisecond call); far below the CPU time they used, on every target. Twice the judge's own timer's
    overhead (`timer_overhead_ms`: the GPU timer's stream barrier, questions and synchronizations) is taken out of
    the bracket: a candidate's process, woken for each request, is slower at the same steps."""
    if not remote.timed:
        return {"name": "judge's clock", "passed": True, "detail": "no timed call"}, "", None
    reported = statistics.median(ms for ms, _, _ in remote.timed)
    fastest = min(w for _, w, _ in remote.timed)
    trip = remote.round_trip_ms or 0.0
    floor = REPORT_MIN_SHARE * (fastest - trip - 2 * remote.timer_overhead_ms) - REPORT_SLACK_MS
    bounds = [c for _, _, c in remote.timed if c is not None]
    cpu_floor = statistics.median(bounds) if len(bounds) == len(remote.timed) else None
    gpu = (f" (less the device timer's lead-in, up to {remote.lead_in_ms:.3g} ms; {remote.clean_calls} of "
           f"{len(remote.timed)} calls launched ahead of the device; the judge's timer spends at least "
           f"{remote.timer_overhead_ms:.3g} ms around a call)" if remote.lead_in_ms else "")
    detail = (f"median timed call {reported:.4g} ms as the candidate's process measured it; the judge's "
              f"fastest bracket around one {fastest:.4g} ms{gpu}, channel round trip {trip:.3g} ms; every "
              f"report within its bracket" +
              (f"; CPU time of the timed calls (their requests, and what ran after they returned until their "
               f"outputs were delivered) over {remote.cores} cores: median {cpu_floor:.4g} ms (a report below it "
               f"counts as that)" if cpu_floor is not None else "; no CPU reading"))
    if cpu_floor is not None and reported < REPORT_MIN_SHARE * cpu_floor - REPORT_SLACK_MS:
        # load cannot explain this one: CPU time is what the process used, however late it was woken
        return {}, "", f"timed calls reported far below the CPU time they used: {detail} [rule no-patching]"
    if reported >= floor:
        left = (f"{remote.left_running_calls} of {len(remote.timed)} timed calls left work running on another "
                f"stream after they returned (timed on the host until the device was idle); join side streams "
                f"back before returning (torch.cuda.current_stream().wait_stream(side))"
                if remote.left_running_calls else "")
        return {"name": "judge's clock", "passed": True, "detail": detail}, left, None
    if strict:
        return {}, "", f"timed calls reported far below the judge's own clock: {detail} [rule no-patching]"
    return ({"name": "judge's clock", "passed": True, "detail": detail},
            f"the judge could not confirm the reported times ({detail}): on a busy machine the judge's brackets "
            f"are loose; were the reports forged, they would look like this too", None)
