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

Each candidate's process also gets a CPU probe (`cpu_probe`): the caller reads that process tree's CPU time whenever
the judge asks over a socket of its own, which the judge uses to see work done after a call returned. A head-to-head
contest is the same with one candidate's process (and probe) per contender.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from .cpu_probe import CpuProbe
from .sandbox import ChildOutcome

PEER_GRACE_S = 3.0  # how long a lost candidate's process may take to be reaped with its own exit status
PEER_EXTRA_TIMEOUT_S = 5.0


def enabled() -> bool:
    """Linux (memfd, SCM_RIGHTS) and not turned off."""
    return sys.platform.startswith("linux") and hasattr(os, "memfd_create") and \
        os.environ.get("KFORGE_JUDGE", "1") not in ("0", "false", "no")


HANDOVER_VARIABLE = "KFORGE_DEVICE_HANDOVER"  # "0": tensors cross through host memory (harness/device_arena.py)


def run_judged(run_child: Callable[..., ChildOutcome], request: dict, files: dict[str, str], *, timeout_s: float,
               cancel: Callable[[], bool] | None = None, contenders: dict[str, str] | None = None,
               **kwargs) -> ChildOutcome:
    """The judge's outcome (its result is the verdict), with the candidate's exit folded in when the judge lost it,
    and every process's logs. `contenders` ({name: source}, a head-to-head contest): one candidate's process per
    contender, the judge holding `peer_fd_<name>` and `cpu_fd_<name>` for each; without it, one candidate's
    process from `files["candidate.py"]` (`peer_fd`, `cpu_fd`)."""
    problem = {"problem.py": files["problem.py"]}
    # read here, per evaluation: a pre-started judge's environment is the fork server's, from before this call
    request = {**request, "device_handover": os.environ.get(HANDOVER_VARIABLE, "1").strip() != "0"}
    sources = contenders if contenders is not None else {"": files["candidate.py"]}
    done = threading.Event()
    grace = {"until": None}

    def stop_worker() -> bool:
        if cancel is not None and cancel():
            return True
        if not done.is_set():
            return False
        return grace["until"] is None or time.monotonic() > grace["until"]

    worker_kwargs = {k: v for k, v in kwargs.items() if k not in ("on_stage", "relay")}
    workers = {name: _Worker(run_child, request, {**problem, "candidate.py": source}, timeout_s, stop_worker,
                             worker_kwargs) for name, source in sources.items()}
    judge_peers = {}
    for name, w in workers.items():
        suffix = f"_{name}" if name else ""
        judge_peers[f"peer_fd{suffix}"], judge_peers[f"cpu_fd{suffix}"] = w.judge_end, w.probe.judge_end
    judge = None
    try:
        # the judge gets the candidates' sources too, for the static rules; it never imports them
        judge = run_child(request, dict(files), peer=judge_peers, timeout_s=timeout_s, cancel=cancel, **kwargs)
    finally:
        for w in workers.values():
            w.judge_end.close()
        if judge is not None and judge.result is not None and judge.result.get("worker_lost"):
            grace["until"] = time.monotonic() + PEER_GRACE_S
        done.set()
        for w in workers.values():
            w.join()
    if contenders is not None:
        logs = [w.box["outcome"].log for w in workers.values() if "outcome" in w.box] + [judge.log]
        return replace(judge, log="\n".join(log for log in logs if log.strip()))
    only = workers[""]
    return _merge(judge, only.box.get("outcome"), only.box.get("error"))


class _Worker:
    """One candidate's process, run on a thread of the caller: its socket to the judge and its CPU probe."""

    def __init__(self, run_child, request: dict, files: dict[str, str], timeout_s: float, stop, kwargs: dict):
        self.judge_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.probe = CpuProbe()
        self.box: dict = {}

        def work() -> None:
            try:
                self.box["outcome"] = run_child({**request, "mode": "worker"}, files, peer=worker_end,
                                                timeout_s=timeout_s + PEER_EXTRA_TIMEOUT_S, cancel=stop,
                                                on_start=self.probe.watch, **kwargs)
            except BaseException as e:  # noqa: BLE001 - said in the verdict; the judge sees its peer gone
                self.box["error"] = e
            finally:
                worker_end.close()

        self.thread = threading.Thread(target=work, daemon=True, name="kforge-candidate-process")
        self.thread.start()

    def join(self) -> None:
        self.thread.join()
        self.probe.close()


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

