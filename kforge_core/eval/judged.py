"""A judged evaluation: the judge and the candidate's process, two children of one evaluation (caller's side).

The caller makes a SOCK_SEQPACKET socket pair and starts two sandboxed children with one end each
(`sandbox.run_child(..., peer=...)`): the **candidate's process** (`harness.worker`: problem + candidate, its own
private directory, build channel and namespaces) and the **judge** (`harness.run` with a `RemoteCandidate`: the
problem only; never imports the candidate, builds nothing; holds the result channel, the progress channel and the
relay to the shared torch.compile baseline). The verdict is the judge's: only its result descriptor is read. The
two are in separate PID and mount namespaces (neither can see or signal the other, nor read the other's files or
memory); all they share is the socket and the arena the judge passes over it (`harness.shared`).

End of an evaluation: the judge's end governs (its timeout is the evaluation's; the candidate's process gets a few
seconds more, so a hang is the judge's timeout, not a lost peer). Once the judge is done, the candidate's process is
stopped; when the judge says it lost its peer, the candidate's process gets a moment to finish dying so its exit
status (a signal, an exit code, its memory or time limit) becomes the verdict's reason, as in one process.
`KFORGE_JUDGE=0` runs the candidate in the judge's process instead (one child; docs/EVALUATOR.md, known limits).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from .sandbox import ChildOutcome

PEER_GRACE_S = 3.0  # how long a lost candidate's process may take to be reaped with its own exit status
PEER_EXTRA_TIMEOUT_S = 5.0


def enabled() -> bool:
    """Linux (memfd, SCM_RIGHTS) and not turned off."""
    return sys.platform.startswith("linux") and hasattr(os, "memfd_create") and \
        os.environ.get("KFORGE_JUDGE", "1") not in ("0", "false", "no")


def run_judged(run_child: Callable[..., ChildOutcome], request: dict, files: dict[str, str], *, timeout_s: float,
               cancel: Callable[[], bool] | None = None, **kwargs) -> ChildOutcome:
    """The judge's outcome (its result is the verdict), with the candidate's exit folded in when the judge lost it,
    and both processes' logs."""
    judge_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    done = threading.Event()
    grace = {"until": None}
    box: dict = {}

    def stop_worker() -> bool:
        if cancel is not None and cancel():
            return True
        if not done.is_set():
            return False
        return grace["until"] is None or time.monotonic() > grace["until"]

    def work() -> None:
        try:
            box["outcome"] = run_child({**request, "mode": "worker"}, files, peer=worker_end,
                                       timeout_s=timeout_s + PEER_EXTRA_TIMEOUT_S, cancel=stop_worker,
                                       **{k: v for k, v in kwargs.items() if k not in ("on_stage", "relay")})
        except BaseException as e:  # noqa: BLE001 - said in the verdict; the judge sees its peer gone
            box["error"] = e
        finally:
            worker_end.close()

    worker = threading.Thread(target=work, daemon=True, name="kforge-candidate-process")
    worker.start()
    judge = None
    try:
        judge_files = {name: files[name] for name in ("problem.py", "candidate.py") if name in files}
        judge = run_child(request, judge_files, peer=judge_end, timeout_s=timeout_s, cancel=cancel, **kwargs)
    finally:
        judge_end.close()
        if judge is not None and judge.result is not None and judge.result.get("worker_lost"):
            grace["until"] = time.monotonic() + PEER_GRACE_S
        done.set()
        worker.join()
    return _merge(judge, box.get("outcome"), box.get("error"))


def _merge(judge: ChildOutcome, peer: ChildOutcome | None, error: BaseException | None) -> ChildOutcome:
    logs = [o.log for o in (peer, judge) if o is not None and o.log.strip()]
    merged = replace(judge, log="\n".join(logs))
    if judge.result is None or not judge.result.get("worker_lost"):
        return merged
    if peer is None:  # the candidate's process never started
        why = f"{type(error).__name__}: {error}" if error is not None else "unknown"
        result = {**judge.result, "reason": f"the candidate's process could not be started: {why}"}
        return replace(merged, result=result)
    # the verdict is said from how the candidate's process ended, as for a one-process child
    return replace(merged, result=None, returncode=peer.returncode, timed_out=peer.timed_out or judge.timed_out,
                   memory_exceeded=peer.memory_exceeded)

