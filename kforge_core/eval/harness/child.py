"""Entry point of the evaluation child: `python -m kforge_core.eval.harness.child`, request JSON on stdin.

Order matters: the clock and the state snapshot are taken, and the guards installed, before any problem or
candidate code is imported; the result is written to a private duplicate of stdout, framed by the nonce, while
fd 1 goes to the candidate's log (a descriptor the caller opened, `candidate_log_fd`) and fd 2 to the harness's.
The candidate runs in this same process, so this framing keeps only its printed output from passing for a result;
code that finds the nonce and the duplicate can still write one (docs/EVALUATOR.md, known limits).
"""

from __future__ import annotations

import json
import os
import random
import resource
import sys
import time
import traceback
from pathlib import Path

T0 = time.perf_counter()


def _redirect_output(log_fd: int) -> int:
    out_fd = os.dup(1)
    os.dup2(log_fd, 1)
    os.close(log_fd)
    return out_fd


def _emit(out_fd: int, nonce: str, result: dict) -> None:
    data = f"<<{nonce}>>{json.dumps(result, default=_json_default)}<</{nonce}>>".encode()
    while data:
        n = os.write(out_fd, data)
        data = data[n:]


def _json_default(o):
    if isinstance(o, float):
        return None
    return str(o)


def scrub_sys_path(*writable: str | os.PathLike) -> None:
    """Drop from sys.path the current directory ('' or '.', as an interpreter without -P puts it there) and every
    directory the candidate may write (its working directory, HOME): a module planted there must never be found by
    a lazy import. The interpreter is started with -P too (`child_setup.PYTHON_FLAGS`); this holds without it, and in a
    forked child, whose sys.path was set up by the fork server in another directory."""
    def real(p: str) -> str:
        return os.path.realpath(p or ".")

    bad = {real(str(p)) for p in (*writable, os.getcwd(), os.environ.get("HOME", "")) if p} - {os.sep}
    sys.path[:] = [p for p in sys.path if p not in ("", ".") and not any(
        real(p) == b or real(p).startswith(b + os.sep) for b in bad)]
    sys.path_importer_cache.clear()


def is_judge(request: dict) -> bool:
    """The judge of a judged evaluation: it holds the candidate's end(s) of the channel (`peer_fd`, `peer_fd_NAME`)."""
    return request.get("mode") not in ("worker", "build") and any(k.startswith("peer_fd") for k in request)


def _close_file_size_limit(request: dict) -> None:
    """Isolation sets RLIMIT_FSIZE's soft limit and leaves the hard one open for the judge, which sizes its shared
    arena (a memfd: ftruncate counts against the limit) to the problem's tensors, 6 GiB and more at KernelBench's
    sizes. Every other child -- the candidate's process, one-process evaluations, builds -- gets hard = soft now,
    before it imports anything of the problem's or the candidate's, so no code of theirs can raise it."""
    if is_judge(request):
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, soft))


def main() -> None:
    serve(json.loads(sys.stdin.read()))


def serve(request: dict, started: float | None = None) -> None:
    """Evaluate `request` in this process and exit. fd 1 must be where the framed result goes (a pipe to the
    caller, or the result file a fork-server child was given)."""
    random.seed()  # a forked child must not share its fork server's random state
    workdir = Path(request["workdir"])
    from . import progress

    progress.open_channel(request)  # before any problem or candidate code: the caller's FIFOs, opened by us
    _close_file_size_limit(request)
    scrub_sys_path(workdir)
    out_fd = _redirect_output(int(request.pop("candidate_log_fd")))
    nonce = request.pop("nonce")
    try:
        if "build_fd" in request:
            from ..build_service import connect

            connect(int(request.pop("build_fd")))
        if request.get("mode") == "build":
            from ..build_service import serve_build

            result = serve_build(request, workdir)
        elif request.get("mode") == "trace":  # the built-in synthesizer's graph of a problem (no candidate)
            from ...synth.trace import trace

            result = trace(request, workdir)
        elif request.get("mode") == "worker":  # the candidate's process of a judged evaluation
            from . import worker

            result = worker.serve(request, workdir)
        else:
            from . import run as runner

            result = runner.run(request, workdir)
    except BaseException as e:  # noqa: BLE001 - the harness must always answer
        result = {"status": "runtime_error", "reason": f"evaluation harness failed: {type(e).__name__}: {e}",
                  "harness_error": traceback.format_exc()[-4000:]}
    from .. import ceilings

    if ceilings.unsaved():
        result["measured_ceilings"] = ceilings.unsaved()
    result["child_wall_s"] = time.perf_counter() - (started or T0)
    _emit(out_fd, nonce, result)
    sys.stdout.flush()
    os._exit(0)  # skip atexit handlers and finalizers a candidate may have registered


if __name__ == "__main__":
    main()
